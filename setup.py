"""The package's layout, which pyproject.toml cannot say alone: delivery_semantics from plugins/, and the
repository's folders it needs at run time (the SQL migrations, the Spark applications, the Java
sources) shipped inside it as delivery_semantics/_shipped/<folder> (delivery_semantics.locations)."""

from setuptools import find_packages, setup

SHIPPED = ("sql", "spark_apps", "clients")
# What a shipped folder holds that the platform reads; never bytecode or a build.
SHIPPED_FILES = ["*.sql", "*.py", "*.java", "**/*.py", "**/*.java"]

packages = find_packages("plugins", include=["delivery_semantics", "delivery_semantics.*"])
package_dir = {"": "plugins"}
package_data = {
    "delivery_semantics": ["*.json", "py.typed"],
    "delivery_semantics.audit": ["*.json"],
    "delivery_semantics.reporting": ["templates/*"],
}
for folder in SHIPPED:
    name = f"delivery_semantics._shipped.{folder}"
    packages.append(name)
    package_dir[name] = folder
    package_data[name] = SHIPPED_FILES

setup(packages=packages, package_dir=package_dir, package_data=package_data, include_package_data=False)
