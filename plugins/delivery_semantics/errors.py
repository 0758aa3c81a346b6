"""The errors a name or a setting is refused with, at the bottom of the package: the catalog and
the clients' registry both raise them, and every layer above catches them by these names."""


class CatalogError(ValueError):
    """A name the catalog does not know, or a combination it refuses; the message says why."""


class ModeError(CatalogError):
    pass


class ScenarioError(CatalogError):
    pass
