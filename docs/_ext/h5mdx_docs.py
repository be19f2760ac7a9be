"""Sphinx helpers for the h5mdx documentation (no network, no generated files in git).

Two directives and two markers:

``.. h5mdx-api:: module [module ...]``
    ``automodule`` for every listed module that imports. A module listed in
    ``h5mdx_api_optional`` (conf.py) that does not import yet becomes a note;
    any other module that fails to import is a build error.
``.. h5mdx-cli::``
    The command-line reference, generated from ``h5mdx.cli.build_parser()``:
    one ``program`` per subcommand and one ``option`` per flag, so that
    ``:option:`h5mdx info --json``` in any page resolves, and a reference to a
    flag that does not exist fails the (nitpicky) build.
Unqualified h5mdx names in docstrings resolve when exactly one documented object
has that name.

``<!-- h5mdx-results -->`` (a marker in a Markdown page)
    Replaced by the Markdown tables under ``benchmarks/results/*.md`` (file names in
    ``h5mdx_results``), read at build time; a missing file is announced as such.
``<!-- h5mdx-optional-pages -->``
    Replaced by a hidden toctree of the pages of ``h5mdx_optional_pages`` that
    exist (pages other people write, such as ``reliability.md``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)


def _parse(directive: SphinxDirective, lines: list[str], source: str) -> list[nodes.Node]:
    container = nodes.section()
    content = StringList()
    for i, line in enumerate(lines):
        content.append(line, source, i)
    nested_parse_with_titles(directive.state, content, container)
    return list(container.children)


# ------------------------------------------------------------------------------- API


class H5mdxApi(SphinxDirective):
    """``automodule`` for each existing module of a list."""

    required_arguments = 1
    optional_arguments = 50
    has_content = False

    def run(self) -> list[nodes.Node]:
        optional = set(self.config.h5mdx_api_optional)
        lines: list[str] = []
        for name in self.arguments:
            try:
                importlib.import_module(name)
            except ImportError as err:
                if name in optional:
                    logger.info("h5mdx-api: %s not importable yet (%s)", name, err)
                    lines += [
                        f".. note:: ``{name}`` is not part of this build of h5mdx yet.",
                        "",
                    ]
                    continue
                raise self.error(f"h5mdx-api: cannot import {name}: {err}") from err
            members = _own_members(name)
            lines += [f".. automodule:: {name}"]
            if members:
                lines += [f"   :members: {', '.join(members)}", "   :show-inheritance:"]
            lines += [""]
        return _parse(self, lines, f"<h5mdx-api {' '.join(self.arguments)}>")


def _own_members(modname: str) -> list[str]:
    """Public names of a module that are defined in it (not re-exported), in source order.

    Packages such as :mod:`h5mdx.timing` re-export their submodules' functions in
    ``__all__``; documenting those again under the package would describe every
    object twice. Names defined in a private submodule (:mod:`h5mdx.format.h5md`'s
    ``_walk``...) are the package's own: it is their only documented place.
    """
    module = importlib.import_module(modname)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        source = ""
    own = []
    for name in names:
        obj = getattr(module, name, None)
        if obj is None or inspect.ismodule(obj):
            continue
        defined_in = getattr(obj, "__module__", None)
        if isinstance(defined_in, str) and (inspect.isclass(obj) or callable(obj)):
            if defined_in == modname or defined_in.startswith(f"{modname}._"):
                own.append(name)
        elif re.search(rf"^{re.escape(name)}\s*[:=]", source, re.MULTILINE):
            own.append(name)
    return own


# ------------------------------------------------------------------------------- CLI


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_lines(parser: argparse.ArgumentParser) -> list[str]:
    lines: list[str] = []
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            if action.nargs == 0:
                sig = ", ".join(action.option_strings)
            else:
                metavar = action.metavar or action.dest.upper()
                if isinstance(metavar, tuple):
                    metavar = " ".join(metavar)
                if action.choices and not action.metavar:
                    metavar = "{" + ",".join(map(str, action.choices)) + "}"
                sig = ", ".join(f"{o} {metavar}" for o in action.option_strings)
        else:
            sig = str(action.metavar or action.dest)
            if isinstance(action.metavar, tuple):
                sig = " ".join(action.metavar)
        # as ``--help`` prints it: %(default)s, %(prog)s, ... filled in and %% as %
        help_text = formatter._expand_help(action) if action.help else ""
        help_text = help_text.replace("*", r"\*").replace("`", r"\`").replace("|", r"\|")
        lines += [f".. option:: {sig}", "", f"   {help_text or '(no description)'}", ""]
    return lines


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().split())[len("usage: "):]


class H5mdxCli(SphinxDirective):
    """The ``h5mdx`` command-line reference from the real argument parser."""

    has_content = False
    option_spec = {"prog": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        from h5mdx.cli import build_parser

        parser = build_parser()
        prog = parser.prog
        lines = [f".. program:: {prog}", "", *_option_lines(parser)]
        for name, sub in sorted(_subparsers(parser).items()):
            title = f"{prog} {name}"
            desc = (sub.description or "").strip()
            lines += [title, "-" * len(title), "", f".. program:: {title}", ""]
            lines += [".. code-block:: text", "", f"   {_usage(sub)}", ""]
            if desc:
                lines += [
                    "\n".join(re.sub(r"([*`|])", r"\\\1", ln) for ln in desc.splitlines()),
                    "",
                ]
            lines += _option_lines(sub)
        out: list[str] = []
        for block in lines:
            out.extend(block.split("\n"))
        return _parse(self, out, "<h5mdx-cli>")


# -------------------------------------------------------------------- benchmark results


_HEADING = re.compile(r"^(#{1,6})\s")
_IMAGE = re.compile(r"(!\[[^\]]*\]\()([^)\s]+)(\))")


def _result_markdown(path: Path, docs_dir: Path) -> str:
    """A result file, headings demoted below the page's and image links made relative."""
    text = path.read_text(encoding="utf-8")
    base = os.path.relpath(path.parent, docs_dir)
    out = []
    for line in text.splitlines():
        m = _HEADING.match(line)
        if m:
            depth = min(6, len(m.group(1)) + 2)
            line = "#" * depth + line[len(m.group(1)):]

        def fix(mm: re.Match[str]) -> str:
            target = mm.group(2)
            if "://" in target or target.startswith("/"):
                return mm.group(0)
            return f"{mm.group(1)}{Path(base, target).as_posix()}{mm.group(3)}"

        out.append(_IMAGE.sub(fix, line))
    return "\n".join(out)


def _inject_results(app: Sphinx, docname: str, source: list[str]) -> None:
    marker = "<!-- h5mdx-results -->"
    if marker not in source[0]:
        return
    docs_dir = Path(app.srcdir)
    results = docs_dir.parent / "benchmarks" / "results"
    parts = []
    for name, title, how in app.config.h5mdx_results:
        path = results / name
        parts.append(f"## {title}\n")
        if path.is_file():
            parts.append(f"From `benchmarks/results/{name}` (written by `{how}`).\n")
            parts.append(_result_markdown(path, docs_dir) + "\n")
        else:
            parts.append(
                f"```{{note}}\nNo results yet: `benchmarks/results/{name}` does not exist. "
                f"Run `{how}` to produce it.\n```\n"
            )
        if path.is_file():
            app.env.note_dependency(str(path))
    source[0] = source[0].replace(marker, "\n".join(parts))


def _inject_optional_pages(app: Sphinx, docname: str, source: list[str]) -> None:
    """Add the pages of ``h5mdx_optional_pages`` that exist to a hidden toctree."""
    marker = "<!-- h5mdx-optional-pages -->"
    if marker not in source[0]:
        return
    present = [
        page for page in app.config.h5mdx_optional_pages
        if any((Path(app.srcdir) / f"{page}{ext}").is_file() for ext in (".md", ".rst"))
    ]
    block = ""
    if present:
        block = "```{toctree}\n:maxdepth: 1\n:hidden:\n\n" + "\n".join(present) + "\n```\n"
    source[0] = source[0].replace(marker, block)


def _resolve_short_name(app: Sphinx, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve an unqualified h5mdx name (``:func:`chunk_aligned_blocks```) if it is unique.

    Docstrings often name a function of another h5mdx module without its module.
    If exactly one documented h5mdx object has that name, link to it; otherwise the
    reference stays unresolved and the nitpicky build fails, as it should.
    """
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    domain = env.get_domain("py")
    if target.startswith("h5mdx.") and target.count(".") >= 1:
        # ``h5mdx.rmsd`` (a function the package loads on first use) -> where it is defined
        import h5mdx

        name = target.rsplit(".", 1)[-1]
        home = h5mdx._LAZY.get(name) if target == f"h5mdx.{name}" else None
        doubled = f"{home}.{name}" if home else f"{target}.{name}"
        obj = domain.objects.get(doubled)
        if obj is not None and obj.objtype in ("function", "class"):
            from sphinx.util.nodes import make_refnode

            return make_refnode(app.builder, node["refdoc"], obj.docname, obj.node_id,
                                contnode, doubled)
        return None
    if not target or "." in target:
        return None
    matches = [
        (name, obj) for name, obj in domain.objects.items()
        if name.startswith("h5mdx.") and name.rsplit(".", 1)[-1] == target
    ]
    if len(matches) != 1:
        return None
    name, obj = matches[0]
    from sphinx.util.nodes import make_refnode

    return make_refnode(app.builder, node["refdoc"], obj.docname, obj.node_id, contnode, name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("h5mdx_api_optional", [], "env")
    app.add_config_value("h5mdx_results", [], "env")
    app.add_config_value("h5mdx_optional_pages", [], "env")
    app.add_directive("h5mdx-api", H5mdxApi)
    app.add_directive("h5mdx-cli", H5mdxCli)
    app.connect("source-read", _inject_results)
    app.connect("source-read", _inject_optional_pages)
    app.connect("missing-reference", _resolve_short_name)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
