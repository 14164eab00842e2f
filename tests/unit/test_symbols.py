"""taskforge.repo.symbols on real packages (known facts of pinned sdists) and on small synthetic ones."""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from taskforge.errors import TaskforgeError
from taskforge.repo.sources import fetch
from taskforge.repo.symbols import Symbol, SymbolIndex, build_index

PROJECTS = {
    "iniconfig": ("pypi:iniconfig==2.3.1", ["src/iniconfig"]),
    "cachetools": ("pypi:cachetools==8.0.2", ["src/cachetools"]),
    "toolz": ("pypi:toolz==1.2.0", ["toolz", "tlz"]),
    "boltons": ("pypi:boltons==26.2.0", ["boltons"]),
}


@pytest.fixture(scope="session")
def indexed(session_cache: Path) -> Callable[[str], SymbolIndex]:
    built: dict[str, SymbolIndex] = {}

    def get(name: str) -> SymbolIndex:
        if name not in built:
            spec, package_paths = PROJECTS[name]
            snapshot = fetch(spec, cache_dir=session_cache / "sources")
            built[name] = build_index(snapshot.path, package_paths=package_paths)
        return built[name]

    return get


def kinds(index: SymbolIndex) -> dict[str, int]:
    return dict(Counter(s.kind for s in index.symbols.values()))


# --- real packages -------------------------------------------------------------------------------


def test_iniconfig(indexed: Callable[[str], SymbolIndex]) -> None:
    index = indexed("iniconfig")
    assert index.modules == {
        "iniconfig": "src/iniconfig/__init__.py",
        "iniconfig._parse": "src/iniconfig/_parse.py",
        "iniconfig._version": "src/iniconfig/_version.py",
        "iniconfig.exceptions": "src/iniconfig/exceptions.py",
    }
    assert kinds(index) == {"class": 4, "method": 15, "function": 5}
    assert list(index.symbols)[:3] == [
        "iniconfig:SectionWrapper",
        "iniconfig:SectionWrapper.__init__",
        "iniconfig:SectionWrapper.lineof",
    ]
    parse = index.symbols["iniconfig._parse:parse_ini_data"]
    assert parse == Symbol(
        qualname="iniconfig._parse:parse_ini_data",
        module="iniconfig._parse",
        path="src/iniconfig/_parse.py",
        kind="function",
        name="parse_ini_data",
        start_line=18,
        end_line=65,
        signature=(
            "def parse_ini_data(path: str, data: str, *, strip_inline_comments: bool, "
            "strip_section_whitespace: bool = False) -> tuple[Mapping[str, Mapping[str, str]], "
            "Mapping[tuple[str, str | None], int]]"
        ),
        docstring=parse.docstring,
        parent=None,
    )
    assert parse.docstring is not None and parse.docstring.startswith("Parse INI data and return sections and sources")
    assert not parse.is_private and index.symbols["iniconfig._parse:_parseline"].is_private
    assert not index.symbols["iniconfig:IniConfig.__init__"].is_private
    # A quoted forward reference stays as written.
    assert index.symbols["iniconfig:SectionWrapper.__init__"].signature == (
        'def __init__(self, config: "IniConfig", name: str) -> None'
    )
    # @overload stubs and the implementation are one symbol; the symbol is the implementation.
    get = index.symbols["iniconfig:SectionWrapper.get"]
    assert (get.start_line, get.end_line, get.kind, get.parent) == (65, 71, "method", "iniconfig:SectionWrapper")
    assert index.spans["iniconfig:SectionWrapper.get"] == ((35, 36), (38, 43), (45, 51), (53, 54), (56, 62), (65, 71))
    assert index.symbol_at("src/iniconfig/__init__.py", 40) == get
    # A function nested in a method.
    nested = index.symbols["iniconfig:SectionWrapper.__iter__.lineof"]
    assert (nested.kind, nested.parent) == ("function", "iniconfig:SectionWrapper.__iter__")
    assert index.symbol_at("src/iniconfig/__init__.py", 80) == nested
    assert index.symbol_at("src/iniconfig/__init__.py", 1) is None
    assert index.symbol_at("src/iniconfig/__init__.py", 10_000) is None
    # ``from . import _parse`` then ``_parse.parse_ini_data(...)``.
    assert index.references["iniconfig:IniConfig.__init__"] == {"iniconfig._parse:parse_ini_data"}
    # ``self.lineof`` and a module-level class.
    assert index.references["iniconfig:IniConfig.__iter__"] == {
        "iniconfig:IniConfig.lineof",
        "iniconfig:SectionWrapper",
    }
    # A class references its methods.
    assert "iniconfig:IniConfig.lineof" in index.references["iniconfig:IniConfig"]
    assert index.referenced_by["iniconfig:IniConfig.lineof"] == {"iniconfig:IniConfig", "iniconfig:IniConfig.__iter__"}
    assert index.referenced_by["iniconfig.exceptions:ParseError"] == {
        "iniconfig._parse:_parseline",
        "iniconfig._parse:parse_ini_data",
        "iniconfig._parse:parse_lines",
    }
    assert index.exclusive_private_helpers("iniconfig._parse:parse_lines") == ("iniconfig._parse:_parseline",)
    assert index.exclusive_private_helpers("iniconfig._parse:parse_ini_data") == ()
    assert index.importers("iniconfig.exceptions") == {"iniconfig", "iniconfig._parse"}
    assert index.importers("iniconfig") == frozenset()
    assert index.all_names["iniconfig"] == ("COMMENTCHARS", "IniConfig", "ParseError", "iscommentline")
    # The re-exported constant resolves to where it is defined.
    assert index.namespaces["iniconfig"]["COMMENTCHARS"] == {"iniconfig._parse:COMMENTCHARS"}


def test_cachetools(indexed: Callable[[str], SymbolIndex]) -> None:
    index = indexed("cachetools")
    assert kinds(index) == {"class": 37, "method": 162, "function": 17}
    assert len(index.modules) == 7
    cached = index.symbols["cachetools:cached"]
    assert cached.signature == "def cached(cache, key=keys.hashkey, lock=None, condition=None, info=False)"
    assert cached.docstring is not None
    assert cached.docstring.startswith("Decorator to wrap a function with a memoizing callable")
    # A default value belongs to the function; a nested function is referenced by its parent.
    assert index.references["cachetools:cached"] == {"cachetools.keys:hashkey", "cachetools:cached.decorator"}
    # ``self.expire`` in a subclass, ``self.timer`` from the base, a name-mangled private method.
    assert {
        "cachetools:TLRUCache.expire",
        "cachetools:_TimedCache.timer",
        "cachetools:TLRUCache.__delitem",
        "cachetools:Cache.__setitem__",
    } <= index.references["cachetools:TLRUCache.__setitem__"]
    # ``super().__copy__()`` in LFUCache resolves in its base class.
    assert "cachetools:Cache.__copy__" in index.references["cachetools:LFUCache.__copy__"]
    # Cross-module: cachetools.func imports LRUCache from the package.
    assert index.references["cachetools.func:lru_cache"] == {"cachetools.func:_cache", "cachetools:LRUCache"}
    assert index.referenced_by["cachetools.keys:hashkey"] == {"cachetools.func:_cache.decorator", "cachetools:cached"}
    assert index.importers("cachetools.keys") == {"cachetools", "cachetools.func"}
    assert index.exclusive_private_helpers("cachetools.func:ttl_cache") == ("cachetools.func:_UnboundTTLCache",)
    # Private methods of the same class are helpers; the class containing them is not a user.
    assert index.exclusive_private_helpers("cachetools:TLRUCache.__setitem__") == ("cachetools:TLRUCache.__delitem",)
    # Nothing in cachetools runs at import time but class creation.
    assert index.import_time == frozenset()


def test_toolz(indexed: Callable[[str], SymbolIndex]) -> None:
    index = indexed("toolz")
    assert kinds(index) == {"class": 8, "method": 57, "function": 108}
    # Test packages (toolz/tests, toolz/sandbox/tests) are left out.
    assert sorted(index.modules) == [
        "tlz",
        "tlz._build_tlz",
        "toolz",
        "toolz._signatures",
        "toolz.compatibility",
        "toolz.curried",
        "toolz.curried.exceptions",
        "toolz.curried.operator",
        "toolz.dicttoolz",
        "toolz.functoolz",
        "toolz.itertoolz",
        "toolz.recipes",
        "toolz.sandbox",
        "toolz.sandbox.core",
        "toolz.sandbox.parallel",
        "toolz.utils",
    ]
    # ``from .itertoolz import *`` (through itertoolz's __all__), then ``from toolz import (...)``.
    assert index.namespaces["toolz"]["groupby"] == {"toolz.itertoolz:groupby"}
    assert index.imported_by["toolz.itertoolz:merge_sorted"] == {"toolz.curried"}
    # toolz.curried rebinds most names: ``groupby = toolz.curry(toolz.groupby)`` uses it.
    assert "<module toolz.curried>" in index.referenced_by["toolz.itertoolz:groupby"]
    assert index.exclusive_private_helpers("toolz.itertoolz:merge_sorted") == (
        "toolz.itertoolz:_merge_sorted_binary",
        "toolz.itertoolz:_merge_sorted_binary_key",
    )
    # curry instances are built while toolz.curried is imported, and tlz's loader runs then too.
    assert {
        "toolz.functoolz:curry.__init__",
        "toolz.functoolz:curry.__hash__",
        "toolz.dicttoolz:merge",
        "tlz._build_tlz:TlzLoader.exec_module",
        "tlz._build_tlz:TlzLoader.find_spec",
    } <= index.import_time
    assert "toolz.itertoolz:groupby" not in index.import_time


def test_boltons(indexed: Callable[[str], SymbolIndex]) -> None:
    index = indexed("boltons")
    assert kinds(index) == {"class": 92, "method": 701, "function": 211}
    assert len(index.modules) == 30
    # A header over three lines, joined on one.
    assert index.symbols["boltons.cacheutils:make_cache_key"].signature == (
        "def make_cache_key(args, kwargs, typed=False, kwarg_mark=_KWARG_MARK, "
        "fasttypes=frozenset([int, str, frozenset, type(None)]))"
    )
    # The span starts at the decorator.
    fromkeys = index.symbols["boltons.dictutils:OrderedMultiDict.fromkeys"]
    lines = (index.repo / fromkeys.path).read_text().splitlines()
    assert lines[fromkeys.start_line - 1].strip() == "@classmethod"
    assert lines[fromkeys.start_line].lstrip().startswith("def fromkeys(")
    assert index.symbols["boltons.iterutils:remap"].signature == (
        "def remap(root, visit=default_visit, enter=default_enter, exit=default_exit, cache: bool = True, **kwargs)"
    )
    assert index.references["boltons.iterutils:remap"] >= {
        "boltons.iterutils:default_enter",
        "boltons.iterutils:default_exit",
        "boltons.iterutils:default_visit",
    }
    # Every line of every symbol maps back to it or to a symbol nested in it.
    for qualname, symbol in list(index.symbols.items())[::7]:
        for line in (symbol.start_line, symbol.end_line):
            owner = index.symbol_at(symbol.path, line)
            assert owner is not None and (owner.qualname == qualname or owner.qualname.startswith(qualname + "."))


def test_building_is_deterministic(indexed: Callable[[str], SymbolIndex]) -> None:
    index = indexed("toolz")
    assert build_index(index.repo, package_paths=["toolz", "tlz"]) == index


# --- resolution rules on small packages ----------------------------------------------------------


def make(root: Path, files: dict[str, str], package_paths: list[str] | None = None) -> SymbolIndex:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    return build_index(root, package_paths=package_paths or ["src/pkg"])


def test_import_forms_resolve(tmp_path: Path) -> None:
    index = make(
        tmp_path,
        {
            "src/pkg/__init__.py": """
                from .sub.deep import target as alias
                from pkg.sub import deep
                import pkg.sub.deep as m
                import pkg.sub.deep


                def via_alias():
                    return alias()


                def via_module():
                    return deep.target()


                def via_import_as():
                    return m.target()


                def via_dotted():
                    return pkg.sub.deep.other()


                def via_local_import():
                    from .sub.deep import other
                    return other
                """,
            "src/pkg/sub/__init__.py": "",
            "src/pkg/sub/deep.py": """
                from .. import via_alias


                def target():
                    return via_alias


                def other():
                    pass
                """,
            "src/pkg/sub/test_ignored.py": "def test_x():\n    pass\n",
            "src/pkg/tests/test_more.py": "def test_y():\n    pass\n",
        },
    )
    assert sorted(index.modules) == ["pkg", "pkg.sub", "pkg.sub.deep"]
    refs = index.references
    assert refs["pkg:via_alias"] == {"pkg.sub.deep:target"}
    assert refs["pkg:via_module"] == {"pkg.sub.deep:target"}
    assert refs["pkg:via_import_as"] == {"pkg.sub.deep:target"}
    assert refs["pkg:via_dotted"] == {"pkg.sub.deep:other"}
    assert refs["pkg:via_local_import"] == {"pkg.sub.deep:other"}
    assert refs["pkg.sub.deep:target"] == {"pkg:via_alias"}  # ``from .. import``
    assert index.importers("pkg.sub.deep") == {"pkg"}
    assert index.importers("pkg") == {"pkg.sub.deep"}
    assert index.imported_by["pkg.sub.deep:target"] == {"pkg"}


def test_scoping_rules(tmp_path: Path) -> None:
    index = make(
        tmp_path,
        {
            "src/pkg/__init__.py": """
                def helper():
                    pass


                def shadowed(helper):
                    return helper()  # the parameter, not the function


                def assigned():
                    helper = 1
                    return helper


                def lambda_param():
                    return lambda helper: helper


                def nested():
                    def helper():
                        pass
                    return helper()


                def uses_builtin():
                    return len([])


                def keyword_only():
                    return dict(helper=1)


                class Base:
                    def run(self):
                        return self.step()

                    def step(self):
                        pass

                    @classmethod
                    def build(cls):
                        return cls.step


                class Child(Base):
                    alias = Base.step  # class-body code: attributed to the class

                    def step(self):
                        return super().step()

                    @staticmethod
                    def static(self):
                        return self.step  # not an instance: a plain parameter


                instance = Child()


                def through_instance():
                    return instance.run()


                def through_local_instance():
                    obj = Base()
                    return obj.step()


                RESULT = helper()
                """,
        },
    )
    refs = index.references
    assert refs["pkg:shadowed"] == set()
    assert refs["pkg:assigned"] == set()
    assert refs["pkg:lambda_param"] == set()
    assert refs["pkg:nested"] == {"pkg:nested.helper"}
    assert refs["pkg:uses_builtin"] == set()
    assert refs["pkg:keyword_only"] == set()
    assert refs["pkg:Base.run"] == {"pkg:Base.step"}
    assert refs["pkg:Base.build"] == {"pkg:Base.step"}
    assert refs["pkg:Child"] == {"pkg:Base", "pkg:Base.step", "pkg:Child.step", "pkg:Child.static"}
    assert refs["pkg:Child.step"] == {"pkg:Base.step"}
    assert refs["pkg:Child.static"] == set()
    assert refs["pkg:through_instance"] == {"pkg:Base.run"}
    assert refs["pkg:through_local_instance"] == {"pkg:Base", "pkg:Base.step"}
    assert "<module pkg>" in index.referenced_by["pkg:helper"]
    assert index.uses["<module pkg>"] >= {"pkg:helper", "pkg:Child"}
    # helper() and Child() run at import: Child's dunders, and what they use, may run then.
    assert index.import_time == {"pkg:helper"}
    assert index.exclusive_private_helpers("pkg:Base.run") == ()


def test_star_imports_and_all(tmp_path: Path) -> None:
    index = make(
        tmp_path,
        {
            "src/pkg/__init__.py": """
                from .a import *
                from .b import *

                __all__ = ["shown", "public"]
                __all__ += ["more"]
                """,
            "src/pkg/a.py": """
                __all__ = ["shown"]


                def shown():
                    pass


                def hidden():
                    pass
                """,
            "src/pkg/b.py": """
                def public():
                    pass


                def _private():
                    pass
                """,
            "src/pkg/user.py": """
                from pkg import shown, public, hidden


                def use():
                    return shown(), public(), hidden()
                """,
        },
    )
    assert index.all_names["pkg"] == ("shown", "public", "more")
    assert index.namespaces["pkg"]["shown"] == {"pkg.a:shown"}
    assert "hidden" not in index.namespaces["pkg"] and "_private" not in index.namespaces["pkg"]
    assert index.references["pkg.user:use"] == {"pkg.a:shown", "pkg.b:public"}
    assert "pkg:shown" in index.uses["pkg.user:use"]  # the hop through the package


def test_single_module_project_and_signatures(tmp_path: Path) -> None:
    index = make(
        tmp_path,
        {
            "six_like.py": '''
                import functools


                @functools.lru_cache(maxsize=None)  # cached
                async def fetch(
                    url: str,
                    *,
                    retries: int = 3,  # how many
                    default=(1,),
                ) -> "bytes":
                    """Fetch it.

                        Indented detail.
                    """
                    return b""


                class Meta(type):
                    pass


                class Plain:
                    x = 1


                class WithMeta(Plain, metaclass=Meta):
                    def method(self, /, a, *args, b, **kwargs): ...
                ''',
        },
        package_paths=["six_like.py"],
    )
    assert index.modules == {"six_like": "six_like.py"}
    fetch_ = index.symbols["six_like:fetch"]
    assert fetch_.signature == 'async def fetch(url: str, *, retries: int = 3, default=(1,)) -> "bytes"'
    assert fetch_.docstring == "Fetch it.\n\nIndented detail."  # cleaned like inspect.cleandoc
    assert (fetch_.start_line, fetch_.end_line) == (4, 15)
    assert index.symbols["six_like:Plain"].signature == "class Plain"
    assert index.symbols["six_like:WithMeta"].signature == "class WithMeta(Plain, metaclass=Meta)"
    assert index.symbols["six_like:WithMeta.method"].signature == "def method(self, /, a, *args, b, **kwargs)"
    assert index.references["six_like:WithMeta"] == {"six_like:Plain", "six_like:Meta", "six_like:WithMeta.method"}


def test_syntax_error_and_bad_paths(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text("def broken(:\n    pass\n")
    with pytest.raises(TaskforgeError, match="pkg/__init__.py: syntax error") as info:
        build_index(tmp_path, package_paths=["pkg"])
    assert info.value.reason == "syntax_error"
    with pytest.raises(ValueError, match="does not exist"):
        build_index(tmp_path, package_paths=["missing"])
    with pytest.raises(ValueError, match="at least one"):
        build_index(tmp_path, package_paths=[])


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_signatures_in_files_of_any_newline(newline: str) -> None:
    """A CRLF module (lark ships some) gives the same one-line headers as an LF one."""
    import libcst as cst

    from taskforge.repo.symbols.signatures import signature_of

    source = newline.join(
        ["class Conf:", '    """Doc."""', "", "class Bare: pass", "def f(a,", "      b=1) -> int:", "    return a", ""]
    )
    tree = cst.parse_module(source.encode())
    headers = [signature_of(tree, node) for node in tree.body if isinstance(node, cst.ClassDef | cst.FunctionDef)]
    assert headers == ["class Conf", "class Bare", "def f(a, b=1) -> int"]
