"""Pack the trained-artifact cache for publishing beside the book's HTML (the book workflow runs it
after `make book`): every artifact this code would load, one `<kind>-<key>.tar.gz` each, and
`cache-manifest.json` with the keys and the sha256 of every archive and every file in it
(`dspark_lite.harness.toy.cache.pack_published`). A run elsewhere fetches from it when
$DSPARK_CACHE_URL is set to the folder's address.

    python ci/pack_cache.py --cache .cache/dspark --out _build/html/cache
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dspark_lite.harness.toy import cache  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=None, help="the cache folder (default: the cache's own default)")
    parser.add_argument("--out", type=Path, required=True, help="where the archives and the manifest go")
    args = parser.parse_args(argv)
    root = args.cache if args.cache is not None else cache.cache_dir()
    if not root.is_dir():
        print(f"pack_cache: no cache folder at {root}; nothing to publish", file=sys.stderr)
        return 1
    manifest = cache.pack_published(args.out, root)
    artifacts = manifest["artifacts"]
    size = sum(entry["archive_bytes"] for entry in artifacts.values())
    left = sum(1 for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) - len(artifacts)
    print(f"pack_cache: {len(artifacts)} artifacts ({size / 2 ** 20:.1f} MiB) packed into {args.out}; "
          f"{left} left out (built by other code, or incomplete)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
