"""Index a package's functions, methods and classes, and who references whom, with libcst.

``build_index(repo, package_paths=["src/pkg"])`` parses every ``.py`` file under the package paths
(test files left out) and returns a :class:`SymbolIndex`: one :class:`Symbol` per qualified name
(``"pkg.mod:Class.method"``), with its span, one-line signature and docstring, plus the package's
reference graph. Nothing is imported or run: this is a reading of the source.

Qualified names follow the nesting of ``def`` and ``class`` only: a function nested in ``f`` is
``mod:f.inner`` (no ``<locals>``), and definitions under ``if``/``try``/``with`` blocks belong to
the scope around the block. A name defined more than once in one scope (``@overload`` stubs, a
property's setter, ``try``/``except ImportError`` fallbacks) is one symbol: its fields describe the
last definition, the one that wins at run time, and :attr:`SymbolIndex.spans` lists every one.

References are resolved by name, statically. A *target* is a string:

* ``"pkg.mod:Name"`` or ``"pkg.mod:Class.attr"``: a name in a module's (or a class's) namespace;
  a symbol's qualname when the name is a ``def``/``class``, else a module-level variable, a class
  attribute, or a name the module imports (an import *hop*: using a re-exported name uses every
  module it passes through, so removing any of them is seen);
* ``"pkg.mod"``: a module of the package, used as an object (``keys.hashkey`` uses ``pkg.keys``).

What resolves:

* module-level names, and names of enclosing functions' nested definitions, with Python's scoping
  (a class body's names are visible to the class body only, not to its methods);
* imports: ``import pkg.x``, ``import pkg.x as m`` then ``m.f``, ``from .x import y``, ``from pkg.x
  import y as z``, ``from . import mod``, star imports (through ``__all__`` when it is a literal),
  and re-export chains through any number of modules; imports inside functions too;
* ``self.attr`` and ``cls.attr`` (the first parameter of a method that is not a ``staticmethod``),
  ``Class.attr``, ``super().attr``, and ``x.attr`` where ``x = Class(...)`` (a variable or local
  assigned from a call to a package class): looked up in the class, then its in-package bases,
  depth first;
* code belongs to the innermost enclosing definition; a definition's decorators, default values,
  annotations and base classes belong to it; code outside any definition is ``"<module pkg.mod>"``;
* a class references its methods and nested classes, and a function its nested definitions
  (*containment*; kept in :attr:`SymbolIndex.references`, left out of :attr:`SymbolIndex.uses`).

:attr:`SymbolIndex.import_time` over-approximates what runs while the package is imported, so
that a removal never breaks the import itself (see the field).

Limits (the graph errs towards extra edges; a missing edge is a name the resolver cannot see):

* attributes of anything else are not resolved: ``param.method()``, ``self.helper_obj.method()``,
  ``type(self).method`` are invisible, so a method can be used where the index shows no reference;
* dynamic access is invisible: ``getattr(obj, "name")``, ``globals()["name"]``,
  ``importlib.import_module("pkg.mod")``, names in string annotations, ``__all__`` built at run time;
* local variables shadow a global name for the whole function, but comprehension and lambda
  variables shadow only inside them, and a ``match`` capture pattern counts as a use of its name;
* ``self.x`` in a base class resolves to the base's own ``x`` (or one of its bases'), never to
  an override in a subclass;
* an import of a module outside the package resolves to nothing: only package code is indexed.

A file that does not parse raises ``TaskforgeError(reason="syntax_error")``.

The modules: :mod:`~taskforge.repo.symbols.build` (:func:`build_index`: which files, scanned, then
resolved), :mod:`~taskforge.repo.symbols.scanner` (one file's definitions, bindings and references),
:mod:`~taskforge.repo.symbols.signatures` (one-line headers), :mod:`~taskforge.repo.symbols.resolver`
(references resolved into the index), :mod:`~taskforge.repo.symbols.index` (:class:`Symbol`,
:class:`SymbolIndex`) and :mod:`~taskforge.repo.symbols.source` (libcst reading, writing and node helpers).
"""

from taskforge.repo.symbols.build import build_index
from taskforge.repo.symbols.index import Symbol, SymbolIndex, SymbolKind
from taskforge.repo.symbols.source import (
    absolute_module,
    definition_span,
    dotted_name,
    literal_strings,
    parse_source,
    read_source,
    render_module,
)

__all__ = ["Symbol", "SymbolIndex", "SymbolKind", "absolute_module", "build_index", "definition_span", "dotted_name",
           "literal_strings", "parse_source", "read_source", "render_module"]
