# The version of this package. The build backend (build_backend/idem_build.py)
# writes the release's version here in every wheel and sdist it builds; in the
# repository it stays as below.
__version__ = "0.0.0+unknown"
