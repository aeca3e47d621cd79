"""stackpin's version, in a module of its own: the package's __init__ (the API) imports the stages
lazily, and modules that name the version (the ApplySet tooling, the verified cache's stamp) must not
import it back."""

__version__ = "0.1.0"
