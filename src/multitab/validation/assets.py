"""Great Expectations' Data Docs, offline: the CSS, scripts and fonts their pages load from CDNs, served from
the site itself.

GX's page templates load bootstrap, bootstrap-table, jQuery, Font Awesome, vega ... from CDNs and the logo from
S3, so offline the index draws no table, result pages lose their status icons and "Failed only" throws. The
files come from the npm packages that publish them, exactly as listed in `datadocs_assets.json` (package,
version, npm's sha512 integrity, files, and which CDN URL each file stands for):

- `fetch()` (run by `make` before `repro` and `test`: `python -m multitab.validation.assets`) has npm fetch
  each package's tarball (`npm pack <name>@<version>`, from whichever registry npm is configured with),
  checks its integrity and keeps the listed files under `.cache/datadocs/` (git-ignored). Nothing else
  downloads: validation and tests only read that cache.
- `make_offline(site, pages)` copies the cached files into `<site>/static/vendor/` and rewrites the pages'
  CDN URLs to relative paths (dropping the now meaningless `integrity`/`crossorigin` attributes, which would
  also make a browser refuse a `file://` script); links to GX's web site lose their `href`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from multitab.files.io import atomic_dir, atomic_path, read_json

log = logging.getLogger(__name__)

MANIFEST = Path(__file__).with_name("datadocs_assets.json")
# The repository's cache (src/multitab/validation/assets.py -> repository root); MULTITAB_ASSET_CACHE moves it.
DEFAULT_CACHE = Path(__file__).resolve().parents[3] / ".cache" / "datadocs"
VENDOR = "static/vendor"  # inside the Data Docs site
_STAMP = ".integrity"  # per package folder in the cache and the site: the integrity it was checked against

EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//")  # http://, https://, protocol-relative //
_TAG = re.compile(r"<(script|link|img|a)\b[^>]*>", re.IGNORECASE)
_ATTR = re.compile(r"""\s(src|href)\s*=\s*(["'])(.*?)\2""", re.IGNORECASE | re.DOTALL)
_SRI = re.compile(r"""\s(?:integrity|crossorigin)(?:\s*=\s*(["']).*?\1)?""", re.IGNORECASE)
_CSS_URL = re.compile(r"""url\(\s*(["']?)([^"')]*)\1\s*\)""", re.IGNORECASE)
REFERENCE = re.compile(r"""(?:\b(?:src|href)\s*=\s*["']?|url\(\s*["']?)([^"'\s)>]*)""", re.IGNORECASE)


class AssetError(RuntimeError):
    """A package could not be fetched or failed its integrity check."""


@dataclass(frozen=True)
class Package:
    spec: str  # name@version, e.g. "@fortawesome/fontawesome-free@6.6.0"
    integrity: str  # npm's dist.integrity: "sha512-<base64>"
    files: tuple[str, ...]  # paths inside the package

    @property
    def name(self) -> str:
        return self.spec.rpartition("@")[0]

    @property
    def version(self) -> str:
        return self.spec.rpartition("@")[2]


@dataclass(frozen=True)
class Manifest:
    packages: tuple[Package, ...]
    urls: Mapping[str, str]  # CDN URL -> "<spec>/<file>"
    gx_images: Mapping[str, str]  # GX web asset URL -> file in GX's own static/images (copied by GX)


def load_manifest(path: str | Path = MANIFEST) -> Manifest:
    raw = read_json(path)
    packages = tuple(Package(spec, p["integrity"], tuple(p["files"])) for spec, p in raw["packages"].items())
    specs = {p.spec: p for p in packages}
    for url, target in raw["urls"].items():
        spec, file = _split_target(target)
        if spec not in specs or file not in specs[spec].files:
            raise ValueError(f"{path}: url {url} maps to {target}, which no package lists")
    return Manifest(packages, dict(raw["urls"]), dict(raw["gx_images"]))


def _split_target(target: str) -> tuple[str, str]:
    """ "@scope/name@1.0.0/dist/x.js" -> ("@scope/name@1.0.0", "dist/x.js")."""
    at = target.index("@", 1)
    slash = target.index("/", at)
    return target[:slash], target[slash + 1 :]


def cache_dir() -> Path:
    return Path(os.environ.get("MULTITAB_ASSET_CACHE") or DEFAULT_CACHE)


def _integrity_of(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def _cached(pkg: Package, cache: Path) -> bool:
    folder = cache / pkg.spec
    stamp = folder / _STAMP
    return (
        stamp.exists()
        and stamp.read_text() == pkg.integrity
        and all((folder / f).is_file() for f in pkg.files)
    )


def missing(manifest: Manifest | None = None, cache: Path | None = None) -> list[str]:
    """The packages the cache lacks (or holds at another integrity)."""
    manifest = manifest or load_manifest()
    cache = cache or cache_dir()
    return [p.spec for p in manifest.packages if not _cached(p, cache)]


def fetch(manifest: Manifest | None = None, cache: Path | None = None, *, timeout: float = 300.0) -> list[str]:
    """Have npm fetch the packages the cache lacks (from the registry npm is configured with: its
    `registry` setting, NPM_CONFIG_REGISTRY), check npm's integrity, keep their listed files. Returns the
    specs fetched."""
    manifest = manifest or load_manifest()
    cache = cache or cache_dir()
    fetched = []
    for pkg in manifest.packages:
        if _cached(pkg, cache):
            continue
        log.info("fetching %s with npm", pkg.spec)
        data = _npm_pack(pkg, timeout)
        got = _integrity_of(data)
        if got != pkg.integrity:
            raise AssetError(
                f"{pkg.spec}: npm's tarball has integrity {got}, but {MANIFEST.name} expects {pkg.integrity}; "
                "the download is corrupt or the registry serves another file: nothing was kept"
            )
        _unpack(pkg, data, cache / pkg.spec)
        fetched.append(pkg.spec)
    return fetched


def _npm_pack(pkg: Package, timeout: float) -> bytes:
    """The package's tarball as the registry serves it: `npm pack <spec>` (no scripts run) in a scratch
    folder."""
    again = "; Data Docs need it to work offline. Then run `python -m multitab.validation.assets` again"
    npm = shutil.which("npm")
    if npm is None:
        raise AssetError(f"{pkg.spec}: npm is not installed (Debian: apt-get install npm){again}")
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false",
           "npm_config_audit": "false"}
    with tempfile.TemporaryDirectory(prefix="multitab-npm-") as tmp:
        cmd = [npm, "pack", pkg.spec, "--pack-destination", tmp, "--json", "--ignore-scripts"]
        try:
            r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssetError(f"{pkg.spec}: `npm pack` took over {timeout:.0f} s; check the network{again}") from None
        tarballs = sorted(Path(tmp).glob("*.tgz"))
        if r.returncode != 0 or len(tarballs) != 1:
            raise AssetError(f"{pkg.spec}: could not download it with npm ({_npm_error(r)}); check the network "
                             f"and npm's registry setting (`npm config get registry`){again}")
        return tarballs[0].read_bytes()


def _npm_error(r: subprocess.CompletedProcess[str]) -> str:
    """npm's own summary of why it failed (its --json error, else its last `npm error` line)."""
    try:
        error = json.loads(r.stdout)["error"]
        if error.get("summary"):
            return " ".join(str(part) for part in (error.get("code"), error["summary"]) if part)
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    errors = [line for line in r.stderr.splitlines() if line.startswith("npm error")]
    return errors[0].removeprefix("npm error").strip() if errors else f"npm exited with {r.returncode}"


def _unpack(pkg: Package, data: bytes, folder: Path) -> None:
    """Keep only the listed files (regular files, read by name: no path from the archive is trusted)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar, atomic_dir(folder) as tmp:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if m.isfile() and "/" in m.name}
        for file in pkg.files:
            member = members.get(file)
            extracted = tar.extractfile(member) if member is not None else None
            if extracted is None:
                raise AssetError(f"{pkg.spec}: the package has no file {file} ({MANIFEST.name} lists it)")
            dest = tmp / file
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(extracted.read())
        (tmp / _STAMP).write_text(pkg.integrity)


# ------------------------------------------------------------------------------------------------ the site
def install(site: Path, manifest: Manifest, cache: Path) -> None:
    """Copy the cached package files into <site>/static/vendor/<spec>/ (skipped when already there)."""
    for pkg in manifest.packages:
        dest = site / VENDOR / pkg.spec
        if (dest / _STAMP).exists() and (dest / _STAMP).read_text() == pkg.integrity:
            continue
        with atomic_dir(dest) as tmp:
            shutil.copytree(cache / pkg.spec, tmp, dirs_exist_ok=True)


def make_offline(site: str | Path, pages: Iterable[str | Path]) -> list[str]:
    """Serve the Data Docs `pages` of `site` from the site itself. Returns the external references left
    (URLs the manifest does not map: a newer GX template), empty when every page works offline. When the
    cache lacks packages, pages are left as GX wrote them (they still work online) and a warning says what
    to run."""
    site = Path(site)
    manifest = load_manifest()
    cache = cache_dir()
    lacking = missing(manifest, cache)
    if lacking:
        log.warning(
            "Data Docs keep their CDN links (they need the network): %s not in %s; run "
            "`python -m multitab.validation.assets` (make does) to fetch them",
            ", ".join(lacking),
            cache,
        )
        return []
    install(site, manifest, cache)
    left: list[str] = []
    for page in pages:
        page = Path(page)
        if page.is_file():
            left += [f"{page}: {u}" for u in rewrite_page(page, site, manifest)]
    for line in left:
        log.warning("Data Docs page still loads %s from the network (not in %s)", line, MANIFEST.name)
    return left


def _local(url: str, page: Path, site: Path, manifest: Manifest) -> str | None:
    """The relative path from `page` that replaces `url`, or None when `url` is not one we serve."""
    bare = url.split("?", 1)[0].split("#", 1)[0]
    if url in manifest.urls or bare in manifest.urls:
        target = site / VENDOR / manifest.urls[url if url in manifest.urls else bare]
    elif bare in manifest.gx_images:
        target = site / "static" / "images" / manifest.gx_images[bare]
    elif not EXTERNAL.match(url) and "static/" in bare and not (page.parent / bare).exists():
        # GX's own relative links to its static folder are one level short on result pages (favicon)
        target = site / "static" / bare.split("static/", 1)[1]
        if not target.exists():
            return None
    else:
        return None
    return os.path.relpath(target, page.parent).replace(os.sep, "/")


def rewrite_page(page: Path, site: Path, manifest: Manifest) -> list[str]:
    """Rewrite one page in place (atomically); returns the external references it still has."""
    text = page.read_text(encoding="utf-8")

    def tag(m: re.Match[str]) -> str:
        whole, name = m.group(0), m.group(1).lower()
        attr = _ATTR.search(whole)
        if attr is None:
            return whole
        url = attr.group(3)
        local = _local(url, page, site, manifest)
        if local is not None:
            new = whole[: attr.start(3)] + local + whole[attr.end(3) :]
            return _SRI.sub("", new) if EXTERNAL.match(url) else new
        if name == "a" and EXTERNAL.match(url):
            return whole[: attr.start()] + whole[attr.end() :]  # a link to GX's web site: keep the text
        return whole

    def css(m: re.Match[str]) -> str:
        local = _local(m.group(2), page, site, manifest)
        return m.group(0) if local is None else f"url('{local}')"

    new = _CSS_URL.sub(css, _TAG.sub(tag, text))
    if new != text:
        with atomic_path(page) as tmp:
            tmp.write_text(new, encoding="utf-8")
    return external_references(new)


def external_references(html_text: str) -> list[str]:
    """URLs in src=, href= or url(...) that point off the site (http, https, protocol-relative)."""
    return [u for u in REFERENCE.findall(html_text) if EXTERNAL.match(u)]


def main(argv: list[str] | None = None) -> int:
    """Fetch the Data Docs assets into the cache (nothing to do when they are there)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if argv:
        print("usage: python -m multitab.validation.assets   (fetches the Data Docs assets; no arguments)")
        return 2
    try:
        done = fetch()
    except AssetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"fetched": done, "cache": str(cache_dir())}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
