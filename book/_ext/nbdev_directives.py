"""Keep nbdev's cell directives out of the built pages (loaded through `sphinx: local_extensions`).

The notebooks are the package's source: a cell that opens with `#| export` goes to
transformer_lib/, `#| default_exp MODULE` names the module, and so on. nbdev needs those lines in
the notebooks; a reader of the page does not. After MyST-NB has turned a notebook into a document
tree (and executed it: the executed code is the notebook's, untouched), this extension removes the
leading directive lines from every code cell's displayed source, before Sphinx highlights it. A cell
that held nothing but directives loses its empty source box (and, with no output, the whole cell).

The rule is nbdev's own: directives are the lines at the top of a cell that start with `#|`
(spaces allowed: `# | hide`), mixed with blank lines and cell magics (`%%time`). The directives and
those blank lines go; magics and everything from the first line of code on stay as written, so a
`#|` further down (say inside a string) is never touched.
"""
import re

from docutils import nodes

_DIRECTIVE = re.compile(r"^\s*#\s*\|")
_CELL_MAGIC = re.compile(r"^\s*%%\w+")


def strip_directives(source: str) -> str:
    """`source` without its leading nbdev directive lines (and the blank lines among them).

    Returns `source` unchanged when it does not open with a directive block."""
    lines = source.splitlines(keepends=True)
    kept, found = [], False
    for i, line in enumerate(lines):
        if _DIRECTIVE.match(line):
            found = True
        elif _CELL_MAGIC.match(line):
            kept.append(line)
        elif line.strip():
            if not found:
                return source
            return "".join(kept + lines[i:])
    return "".join(kept) if found else source


def _strip_cell_sources(app, doctree):
    for cell in list(doctree.findall(nodes.container)):
        if cell.get("nb_element") != "cell_code":
            continue
        for box in [c for c in cell.children if isinstance(c, nodes.container)
                    and c.get("nb_element") == "cell_code_source"]:
            for block in list(box.findall(nodes.literal_block)):
                text = block.astext()
                stripped = strip_directives(text)
                if stripped == text:
                    continue
                if stripped.strip():
                    block.rawsource = stripped
                    block[:] = [nodes.Text(stripped)]
                else:
                    block.parent.remove(block)
            if not box.children:
                cell.remove(box)
        if not cell.children:
            cell.parent.remove(cell)


def setup(app):
    app.connect("doctree-read", _strip_cell_sources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
