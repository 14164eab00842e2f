"""Which PyPI distribution provides an imported module (None for the standard library)."""

from __future__ import annotations

import sys
from collections.abc import Mapping

__all__ = ["IMPORT_TO_DISTRIBUTION", "NAMESPACE_PACKAGES", "distribution_for_import"]


IMPORT_TO_DISTRIBUTION: Mapping[str, str] = {
    "attr": "attrs",
    "bs4": "beautifulsoup4",
    "bson": "pymongo",
    "big_o": "big-O",
    "cv2": "opencv-python",
    "Crypto": "pycryptodome",
    "Cryptodome": "pycryptodomex",
    "dateutil": "python-dateutil",
    "delegator": "delegator.py",
    "dns": "dnspython",
    "dotenv": "python-dotenv",
    "git": "GitPython",
    "google.protobuf": "protobuf",
    "gi": "PyGObject",
    "grpc": "grpcio",
    "hamcrest": "PyHamcrest",
    "icu": "PyICU",
    "jose": "python-jose",
    "jwt": "PyJWT",
    "magic": "python-magic",
    "markdown_it": "markdown-it-py",
    "mpl_toolkits": "matplotlib",
    "multipart": "python-multipart",
    "MySQLdb": "mysqlclient",
    "nacl": "PyNaCl",
    "OpenSSL": "pyOpenSSL",
    "PIL": "Pillow",
    "pkg_resources": "setuptools",
    "_pytest": "pytest",
    "pythonjsonlogger": "python-json-logger",
    "railroad": "railroad-diagrams",
    "re2": "google-re2",
    "rpds": "rpds-py",
    "serial": "pyserial",
    "skimage": "scikit-image",
    "sklearn": "scikit-learn",
    "slugify": "python-slugify",
    "socks": "PySocks",
    "tidylib": "pytidylib",
    "websocket": "websocket-client",
    "win32api": "pywin32",
    "win32con": "pywin32",
    "xdist": "pytest-xdist",
    "yaml": "PyYAML",
    "zmq": "pyzmq",
}
"""Imported module -> PyPI distribution, where they differ by more than ``_`` versus ``-``."""

NAMESPACE_PACKAGES = frozenset({"azure", "backports", "google", "jaraco", "repoze", "ruamel", "sphinxcontrib", "zope"})
"""Top-level names shared by many distributions: the distribution is named by two components."""

_PYTHON2_STDLIB = frozenset(
    {
        "__builtin__", "anydbm", "BaseHTTPServer", "commands", "ConfigParser", "Cookie", "cookielib",
        "copy_reg", "cPickle", "cStringIO", "dummy_thread", "exceptions", "htmlentitydefs", "HTMLParser",
        "httplib", "md5", "Queue", "repr", "robotparser", "sets", "sha", "SimpleHTTPServer",
        "SocketServer", "StringIO", "thread", "Tkinter", "urllib2", "urlparse", "UserDict", "xmlrpclib", "gdbm",
    }
)  # fmt: skip
"""Python 2 standard-library modules: old suites import them behind version checks or fallbacks."""

_ALSO_STANDARD_LIBRARY = frozenset({"test", "annotationlib", "compression"})
"""Not in ``sys.stdlib_module_names`` of 3.11 yet never on PyPI: CPython's own ``test`` package,
and modules newer Pythons added (suites import them under a version skip)."""


def distribution_for_import(module: str) -> str | None:
    """The PyPI distribution that provides ``module`` (dotted), or None for stdlib modules.

    Uses :data:`IMPORT_TO_DISTRIBUTION` for the usual mismatches; otherwise the distribution is
    the top-level module name with ``_`` turned into ``-``. Namespace packages (``jaraco``,
    ``zope``...) are named by their first two components (``jaraco.itertools``).
    """
    parts = module.split(".")
    top = parts[0]
    if top == "__future__" or top in sys.stdlib_module_names or top in _PYTHON2_STDLIB or top in _ALSO_STANDARD_LIBRARY:
        return None
    if top in NAMESPACE_PACKAGES:
        if len(parts) < 2:
            return None
        key = f"{top}.{parts[1]}"
        return IMPORT_TO_DISTRIBUTION.get(key, key)
    if top in IMPORT_TO_DISTRIBUTION:
        return IMPORT_TO_DISTRIBUTION[top]
    return top.replace("_", "-")
