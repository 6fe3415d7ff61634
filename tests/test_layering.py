"""The import contract of docs/architecture.md: imports flow one way, down the layers.

Every module of ``src/gpt2np`` is read with ``ast`` (nothing is imported) and each of its
imports, module-level or inside a function, is resolved to a gpt2np module or a top-level
package. Imports under ``if TYPE_CHECKING:`` count too: a type hint that names a module above
is an import upward all the same (only the third-party check leaves them out, since a
type-only import of ``requests`` costs nothing at run time).
"""

from __future__ import annotations

import ast
import fnmatch
import pathlib
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "gpt2np"

#: Bottom to top, by folder: a module may import from its own layer and from the layers its
#: entry allows. The top of the package holds the maths a student reads, the foundation's three
#: modules and the facade; everything else is a folder of one layer.
LAYERS: dict[str, tuple[str, ...]] = {
    "foundation": ("_version", "errors", "hparams", "params", "support", "support.*"),
    "maths": ("erf", "layers", "attention", "block", "model", "kernels", "fast", "fast.*"),
    "tokenizer": ("tokenizer", "tokenizer.*"),
    "files": ("checkpoint", "checkpoint.*", "sources", "sources.*"),
    "runtime": ("runtime", "runtime.*"),
    "uses": ("generation", "generation.*", "scoring", "scoring.*", "golden", "golden.*"),
    "facade": ("__init__", "api", "gpt2"),
    "cli": ("cli", "cli.*", "__main__"),
}  # fmt: skip
MAY_IMPORT: dict[str, set[str]] = {
    "foundation": {"foundation"},
    "maths": {"foundation", "maths"},
    "tokenizer": {"foundation", "tokenizer"},
    "files": {"foundation", "tokenizer", "files"},
    "runtime": {"foundation", "maths", "tokenizer", "runtime"},
    "uses": {"foundation", "maths", "tokenizer", "runtime", "uses"},
    "facade": {"foundation", "maths", "tokenizer", "files", "runtime", "uses", "facade"},
    "cli": {"foundation", "maths", "tokenizer", "files", "runtime", "uses", "facade", "cli"},
}
#: The modules that stay at the top of src/gpt2np/: the teaching text, the foundation's types
#: and the facade. A new module goes into a folder (docs/architecture.md says which).
TOP_LEVEL = {
    "__init__", "__main__", "_version", "api", "gpt2", "errors", "hparams", "params",
    "erf", "layers", "attention", "block", "model", "kernels",
}  # fmt: skip
RUNTIME_DEPENDENCIES = {"numpy", "regex", "requests", "tqdm"}
#: Optional extras (pyproject's optional-dependencies) that a module may import inside its
#: functions only, never when it is imported: the user installs them to use that module.
OPTIONAL_IMPORTS: dict[str, set[str]] = {"scoring.dask": {"dask"}}
#: Beyond the layers: what a module of a layer must never import at all.
FORBIDDEN: dict[str, set[str]] = {
    "maths": {"regex", "requests", "tqdm"},  # the forward pass needs NumPy and nothing else
    "checkpoint.*": {"gpt2np.sources", "requests"},  # a reader is offline
}


def module_name(path: pathlib.Path) -> str:
    """src/gpt2np/checkpoint/loader.py -> 'checkpoint.loader'; a package's __init__ -> its name."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def layer_of(module: str) -> str:
    matches = [
        layer
        for layer, patterns in LAYERS.items()
        if any(fnmatch.fnmatchcase(module, p) for p in patterns)
    ]
    assert len(matches) == 1, f"gpt2np.{module} must belong to exactly one layer, got {matches}"
    return matches[0]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(
    tree: ast.AST, type_checking: bool = False
) -> list[ast.Import | ast.ImportFrom]:
    """The imports of ``tree`` that run; with ``type_checking``, those under
    ``if TYPE_CHECKING:`` too."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def imports_of(module: str, type_checking: bool = True) -> list[tuple[str, int]]:
    """(target, line) for every import of ``module`` (``type_checking``: those for type hints
    too): 'gpt2np.x.y' for the package's own modules (the most specific module that exists),
    else the top-level name ('numpy')."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if module == "__init__":
        package = []
    targets: list[tuple[str, int]] = []
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")), type_checking):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.append(
                    (_own(alias.name.split(".")) or alias.name.split(".")[0], node.lineno)
                )
            continue
        if node.level:  # relative: from . import x, from ..errors import y
            base = package[: len(package) - node.level + 1] if node.level > 1 else package
            dotted = ["gpt2np", *base, *(node.module.split(".") if node.module else [])]
        else:
            dotted = node.module.split(".")
        for alias in node.names:  # 'from . import cache' names a module; 'from .x import f' not
            target = _own([*dotted, alias.name]) or _own(dotted) or dotted[0]
            targets.append((target, node.lineno))
    return targets


def _own(dotted: list[str]) -> str | None:
    """'gpt2np.a.b' if gpt2np.a.b is one of the package's modules, else None."""
    if not dotted or dotted[0] != "gpt2np":
        return None
    name = ".".join(dotted[1:]) or "__init__"
    return "gpt2np." + name if name in MODULES else None


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_flow_down_the_layers(module: str) -> None:
    assert not violations(module), "\n".join(violations(module))


def violations(module: str) -> list[str]:
    """Every import of ``module`` that breaks the contract, as a readable line."""
    layer = layer_of(module)
    found = []
    run = set(imports_of(module, type_checking=False))
    for target, line in imports_of(module):
        where = f"src/gpt2np/{MODULES[module].relative_to(SRC)}:{line}"
        if not target.startswith("gpt2np.") and (target, line) not in run:
            continue  # a third-party name for type hints only costs nothing at run time
        if target.startswith("gpt2np."):
            other = layer_of(target[len("gpt2np.") :])
            if other not in MAY_IMPORT[layer]:
                found.append(
                    f"{where}: gpt2np.{module} ({layer}) imports {target} ({other}); the "
                    f"{layer} layer may import only {sorted(MAY_IMPORT[layer])}"
                )
        else:
            stdlib = getattr(sys, "stdlib_module_names", None)  # Python 3.10+
            known = target in RUNTIME_DEPENDENCIES or target == "gpt2np"
            if target in OPTIONAL_IMPORTS.get(module, ()):
                known = line in _imports_inside_functions(module)
            if stdlib is not None and not known and target not in stdlib:
                found.append(
                    f"{where}: imports {target}, neither the standard library nor one of the "
                    f"runtime dependencies {sorted(RUNTIME_DEPENDENCIES)}"
                )
        for pattern, banned in FORBIDDEN.items():
            if fnmatch.fnmatchcase(module, pattern) or pattern == layer:
                hit = {b for b in banned if target == b or target.startswith(b + ".")}
                if hit:
                    found.append(f"{where}: gpt2np.{module} must not import {sorted(hit)}")
    return found


def _imports_inside_functions(module: str) -> set[int]:
    """The lines of ``module``'s imports that run only when a function of it is called."""
    return _lines_inside_functions(ast.parse(MODULES[module].read_text(encoding="utf-8")))


def _lines_inside_functions(tree: ast.AST) -> set[int]:
    return {
        node.lineno
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(function)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }


def test_an_optional_extra_is_imported_inside_functions_only() -> None:
    """gpt2np.scoring.dask imports dask, in its functions only; an import at the top of a
    module, or in a class body, is not inside a function."""
    dask_lines = {line for target, line in imports_of("scoring.dask", False) if target == "dask"}
    assert dask_lines and dask_lines <= _imports_inside_functions("scoring.dask")
    assert violations("scoring.dask") == []
    source = "import dask\nclass C:\n    import dask\ndef f():\n    import dask.bag\n"
    assert _lines_inside_functions(ast.parse(source)) == {5}


def test_the_cli_modules_do_not_import_each_other_both_ways() -> None:
    graph = _graph()
    cli = ["gpt2np." + m for m in MODULES if layer_of(m) == "cli"]
    both = [(a, b) for a in cli for b in graph[a] if a in graph.get(b, set()) and a < b]
    assert not both, f"these CLI modules import each other: {both}"


def _graph() -> dict[str, set[str]]:
    return {
        "gpt2np." + m: {t for t, _ in imports_of(m) if t.startswith("gpt2np.")} for m in MODULES
    }


def test_no_import_cycles() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt.rsplit(".", 1)[0] == node:  # a package importing its own submodule
                continue
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] if nxt in path else path
                pytest.fail("import cycle: " + " -> ".join([*cycle, nxt]))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_the_contract_reads_imports_correctly() -> None:
    """The resolver itself, on imports whose targets are known, and a violation it must see."""
    targets = {t for t, _ in imports_of("checkpoint.tf_bundle")}
    assert {"gpt2np.errors", "gpt2np.checkpoint.crc32c", "numpy"} <= targets
    assert layer_of("checkpoint.conversion_cache") == "files" and layer_of("__main__") == "cli"
    assert layer_of("__init__") == "facade"
    source = "from .gpt2 import GPT2\nif TYPE_CHECKING:\n    from .api import load\n"
    nodes = _runtime_imports(ast.parse(source))
    assert [n.module for n in nodes] == ["gpt2"]  # the TYPE_CHECKING import does not run
    nodes = _runtime_imports(ast.parse(source), type_checking=True)
    assert [n.module for n in nodes] == ["gpt2", "api"]  # but it is an import all the same


def test_the_top_level_holds_the_maths_the_foundation_and_the_facade() -> None:
    top = {m for m in MODULES if "." not in m and MODULES[m].parent == SRC and m not in
           {p.name for p in SRC.iterdir() if p.is_dir()}}  # fmt: skip
    assert top == TOP_LEVEL, (
        f"new top-level modules {sorted(top - TOP_LEVEL)}: put them in a folder"
    )
    assert len(top) <= 14


def test_no_exported_name_hides_a_module_of_its_name() -> None:
    """``import gpt2np.x.y as m`` gives the attribute y of gpt2np.x: were y both a name that
    package exports (a function, say) and a module of it, a user asking for the module would get
    the function (``import gpt2np.download as dl`` once gave the function download)."""
    import importlib

    for package in [m for m in MODULES if MODULES[m].name == "__init__.py"]:
        dotted = "gpt2np" if package == "__init__" else f"gpt2np.{package}"
        module = importlib.import_module(dotted)
        prefix = "" if package == "__init__" else package + "."
        for name in getattr(module, "__all__", ()):
            if prefix + name in MODULES:
                kind = type(getattr(module, name)).__name__
                assert kind == "module", f"{dotted}.{name} is both a module and an exported {kind}"


def test_no_function_is_over_70_lines() -> None:
    """A function a reader cannot see whole on a screen or two is split (docstring included)."""
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 70:
                    long.append(f"gpt2np.{module}.{node.name}: {n} lines")
    assert not long, "\n".join(long)


#: The teaching text: the clear forward pass a student reads, equations and shapes only.
TEACHING = ("layers", "attention", "block", "model")


def code_lines(path: pathlib.Path) -> int:
    """Lines that hold code: not blank, not only a comment, not part of a docstring."""
    import io
    import tokenize

    text = path.read_text(encoding="utf-8")
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines: set[int] = set()
    no_code = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
               tokenize.DEDENT, tokenize.ENDMARKER}  # fmt: skip
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in no_code:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstrings)


def test_code_lines_counts_code_only(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        '"""Module\ndocstring."""\n\n# a comment\nx = [\n    1,  # one\n]\n\n\n'
        'def f(a):\n    """Doc."""\n    return a\n'
    )
    assert code_lines(source) == 5  # x = [, 1, ], def f, return


def test_the_teaching_files_hold_the_maths_only() -> None:
    """layers, attention, block and model hold the equations: no Protocol, NamedTuple or kernel
    bundle (those live in gpt2np.kernels), and 240 lines of code at most together."""
    counts = {m: code_lines(MODULES[m]) for m in TEACHING}
    assert sum(counts.values()) <= 240, f"the teaching files hold {counts} lines of code"
    for m in TEACHING:
        for node in ast.walk(ast.parse(MODULES[m].read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b) for b in node.bases}
                assert not bases & {"Protocol", "NamedTuple"}, f"gpt2np.{m}.{node.name}"
            if isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                assert not names & {"CLEAR", "FAST"}, f"gpt2np.{m} defines {names}"


def test_each_name_of_the_forward_pass_is_defined_once() -> None:
    """``Past`` and ``attend`` have one definition each, in gpt2np.attention (the others import
    it), and the Kernels bundle and CLEAR theirs in gpt2np.kernels."""
    homes = {"Past": "attention", "attend": "attention", "masked_score": "attention",
             "Kernels": "kernels", "CLEAR": "kernels"}  # fmt: skip
    defined: dict[str, list[str]] = {name: [] for name in homes}
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = {node.name}
            elif isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            else:
                continue
            for name in names & set(homes):
                defined[name].append(module)
    assert defined == {name: [home] for name, home in homes.items()}


def test_the_layer_table_of_the_architecture_page_is_this_contract() -> None:
    """docs/architecture.md's table (layer | where | may import) says what LAYERS and
    MAY_IMPORT say, row for row, in the same order."""
    page = (SRC.parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    lines = page.splitlines()
    start = lines.index("| layer | where | may import |") + 2  # after the header and |---|
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1:-1])
    table = {cells[0].strip(): cells for cells in rows}
    assert list(table) == list(LAYERS)
    below: set[str] = set()
    for layer, (_, where, may) in table.items():
        names = where.replace("`", "").replace(" ", "").split(",")
        patterns = {
            p for n in names for p in ((n[:-1], n[:-1] + ".*") if n.endswith("/") else (n,))
        }
        assert patterns == set(LAYERS[layer]), f"the {layer} row lists {sorted(patterns)}"
        if may.strip() == "everything below":
            allowed = below | {layer}
        else:
            allowed = {w for w in may.replace(";", ",").split(",") if w.strip() in LAYERS}
            allowed = {w.strip() for w in allowed} | {layer}
        assert allowed == MAY_IMPORT[layer], f"the {layer} row may import {sorted(allowed)}"
        below.add(layer)


def _from_imports(module: str) -> list[tuple[str, ast.alias, int]]:
    """(target module, alias, line) for each name of each ``from gpt2np… import`` of ``module``."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if module == "__init__":
        package = []
    found = []
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")), True):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1] if node.level > 1 else package
            dotted = ["gpt2np", *base, *(node.module.split(".") if node.module else [])]
            target = _own(dotted) or ".".join(dotted)
            found.extend((target, alias, node.lineno) for alias in node.names)
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    """Modules talk through public names: ``from .hub_snapshots import _locate`` would make a
    private helper part of an interface nobody declared. An alias of a module may shorten or
    qualify its name, not replace it (``threads``, not ``threads as parallel``)."""
    found = []
    for module in MODULES:
        for target, alias, line in _from_imports(module):
            name, where = alias.name, f"src/gpt2np/{MODULES[module].relative_to(SRC)}:{line}"
            if name.startswith("_") and not name.startswith("__"):
                found.append(f"{where}: imports {name} from {target}")
            is_module = f"{target}.{name}"[len("gpt2np.") :] in MODULES
            asname = alias.asname or name  # a private alias (http as _fetch) stays private
            if is_module and not asname.startswith("_") and name not in asname not in name:
                found.append(f"{where}: imports the module {name} as {alias.asname}")
    assert not found, "\n".join(found)


def _functions(module: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_one_regular_file_opener_and_one_file_lock_live_in_support() -> None:
    """gpt2np.support.bounded_read.open_regular is the one function that opens a file and checks
    that it is a regular one (a FIFO would hang a reader, a device never end); everything else
    calls it. gpt2np.support.lock.FileLock is the one lock class."""
    openers, locks = [], []
    for module in MODULES:
        if module.startswith("support."):
            continue
        for function in _functions(module):
            text = ast.unparse(function)
            if "os.open(" in text and "S_ISREG" in text:
                openers.append(f"gpt2np.{module}.{function.name}")
        tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name.lstrip("_").endswith("Lock"):
                locks.append(f"gpt2np.{module}.{node.name}")
    assert not openers, f"open a file with gpt2np.support.bounded_read.open_regular: {openers}"
    assert not locks, f"lock with gpt2np.support.lock.FileLock: {locks}"
    assert [f.name for f in _functions("support.bounded_read")].count("open_regular") == 1
