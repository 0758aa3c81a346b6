"""The package's layout, which pyproject.toml cannot say alone: delivery_semantics from plugins/, and the
repository's folders it needs at run time (the SQL migrations, the Spark applications, the Java
sources) shipped inside it as delivery_semantics/_shipped/<folder> (delivery_semantics.locations), and
the Java sources' jar that local/package builds with Maven into jvm/ (without it, as from a bare
`pip install .`, they are compiled on first use where a JDK is)."""

from pathlib import Path

from setuptools import find_packages, setup

SHIPPED = ("sql", "spark_apps", "clients", *(("jvm",) if Path("jvm").is_dir() else ()))
# What a shipped folder holds that the platform reads; never bytecode.
SHIPPED_FILES = ["*.sql", "*.py", "*.java", "**/*.py", "**/*.java", "delivery-semantics-jvm-*.jar"]

packages = find_packages("plugins", include=["delivery_semantics", "delivery_semantics.*"])
package_dir = {"": "plugins"}
package_data = {
    "delivery_semantics": ["*.json", "py.typed"],
    "delivery_semantics.audit": ["*.json"],
    "delivery_semantics.clients": ["*.json"],
    "delivery_semantics.reporting": ["templates/*", "*.json"],
}
for folder in SHIPPED:
    name = f"delivery_semantics._shipped.{folder}"
    packages.append(name)
    package_dir[name] = folder
    package_data[name] = SHIPPED_FILES

setup(packages=packages, package_dir=package_dir, package_data=package_data, include_package_data=False)
