"""Static images of the report's charts with Kaleido, Plotly's exporter, which drives a local
Chrome or Chromium. MathJax is switched off: Kaleido would otherwise load it from a CDN."""

from __future__ import annotations

from pathlib import Path

from dlbench.report.plot import Chart

WIDTH_PX = 1200


def write_pngs(charts: list[Chart], out_dir: Path) -> tuple[list[Path], str | None]:
    """(written files, None) or ([], the one-line reason no image was written)."""
    try:
        import kaleido
    except ImportError:
        return [], "static images need Kaleido: pip install 'dlbench[png]' (and a Chrome or Chromium)"
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{c.id}.png" for c in charts]
    specs = [{"fig": c.figure.to_plotly_json(), "path": path,
              "opts": {"format": "png", "width": WIDTH_PX,
                       "height": int(c.figure.layout.height or 450), "scale": 1}}
             for c, path in zip(charts, paths, strict=True)]
    try:
        kaleido.write_fig_from_object_sync(specs, kopts={"mathjax": False})
    except Exception as e:  # Kaleido raises its own types for a missing or broken browser
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return [], f"static image export failed ({type(e).__name__}: {first_line})"
    return paths, None
