"""Data Docs offline: the npm packages behind GX's CDN links are fetched with an integrity check, every CDN
URL of the installed GX templates is mapped, and pages are rewritten to load from the site itself."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from _http_fixture import FixtureServer, Reply  # tests/ is on sys.path (pytest's default import mode)
from multitab.validation import assets


def _tarball(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _manifest(integrity: str) -> assets.Manifest:
    pkg = assets.Package("@scope/lib@1.2.3", integrity, ("dist/lib.min.js",))
    return assets.Manifest((pkg,), {"https://cdn.example/lib.js": "@scope/lib@1.2.3/dist/lib.min.js"}, {})


def _npm_at(server: FixtureServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """npm, configured the ordinary way (its registry setting, here from the environment), asks the fixture
    server; its own cache is a fresh folder, so that every fetch is a request."""
    for name in ("NPM_CONFIG_REGISTRY", "NPM_CONFIG_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("npm_config_registry", server.url("/"))
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-cache"))
    monkeypatch.setenv("npm_config_fetch_retries", "0")


def _publish(server: FixtureServer, tarball: bytes) -> str:
    """The registry's layout for a scoped package: its packument at /@scope%2flib (npm encodes the slash),
    the tarball where the packument says. Returns the tarball's path."""
    path = "/@scope/lib/-/lib-1.2.3.tgz"
    server.add(path, Reply(body=tarball))
    version = {"name": "@scope/lib", "version": "1.2.3",
               "dist": {"tarball": server.url(path), "integrity": assets._integrity_of(tarball)}}
    packument = {"name": "@scope/lib", "dist-tags": {"latest": "1.2.3"}, "versions": {"1.2.3": version}}
    server.add("/@scope%2flib", Reply(body=json.dumps(packument).encode(),
                                      headers={"Content-Type": "application/json"}))
    return path


def test_fetch_checks_npm_integrity_and_keeps_only_the_listed_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package_json = json.dumps({"name": "@scope/lib", "version": "1.2.3"}).encode()
    data = _tarball({"dist/lib.min.js": b"lib();", "package.json": package_json, "src/big.js": b"x" * 100})
    with FixtureServer() as server:
        _npm_at(server, tmp_path, monkeypatch)
        path = _publish(server, data)
        good = _manifest(assets._integrity_of(data))

        bad = _manifest(assets._integrity_of(data + b"tampered"))
        with pytest.raises(assets.AssetError, match="integrity"):
            assets.fetch(bad, tmp_path / "cache")
        assert not (tmp_path / "cache" / "@scope" / "lib@1.2.3").exists(), "a failed check keeps nothing"
        assert len(server.seen(path)) == 1, "npm fetched the tarball from the configured registry"

        assert assets.fetch(good, tmp_path / "cache") == ["@scope/lib@1.2.3"]
        folder = tmp_path / "cache" / "@scope" / "lib@1.2.3"
        kept = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        assert kept == [".integrity", "dist/lib.min.js"]
        assert (folder / "dist/lib.min.js").read_bytes() == b"lib();"
        assert assets.missing(good, tmp_path / "cache") == []
        requests = len(server.requests)
        assert assets.fetch(good, tmp_path / "cache") == [] and len(server.requests) == requests  # cached


def test_fetch_names_the_package_when_the_registry_does_not_have_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FixtureServer() as server:
        _npm_at(server, tmp_path, monkeypatch)
        with pytest.raises(assets.AssetError, match=r"@scope/lib@1\.2\.3: could not download it with npm \(.*404"):
            assets.fetch(_manifest("sha512-x"), tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.js"))


def test_fetch_without_npm_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on it
    with pytest.raises(assets.AssetError, match=r"@scope/lib@1\.2\.3: npm is not installed"):
        assets.fetch(_manifest("sha512-x"), tmp_path / "cache")


def _gx_cdn_urls() -> set[str]:
    """Every off-site URL the installed GX templates load (src=, link href=, CSS url()), links excluded."""
    import great_expectations

    view = Path(great_expectations.__file__).parent / "render" / "view"
    urls: set[str] = set()
    for f in [*(view / "templates").glob("*.j2"), *(view / "static" / "styles").glob("*.css")]:
        text = re.sub(r"<a\b[^>]*>", "", f.read_text())  # links to GX's web site are not loaded
        for url in assets.REFERENCE.findall(text):
            if assets.EXTERNAL.match(url):
                urls.add(url)
        # the navbar logo's folder is a template variable: `static_images_dir = "https://..."`
        urls |= {m + "logo-long.png" for m in re.findall(r'static_images_dir = "(https://[^"]+)"', text)}
    return urls


def test_every_cdn_url_of_the_installed_gx_templates_is_served_locally() -> None:
    manifest = assets.load_manifest()
    urls = _gx_cdn_urls()
    assert len(urls) >= 15, urls  # the scan sees the templates' CDN links at all
    unmapped = sorted(u for u in urls if u not in manifest.urls and u not in manifest.gx_images)
    assert not unmapped, f"map these in {assets.MANIFEST.name}: {unmapped}"


def test_rewrite_points_every_cdn_url_at_the_site(tmp_path: Path) -> None:
    manifest = assets.load_manifest()
    site = tmp_path / "site"
    page = site / "validations" / "suite" / "run" / "time" / "batch.html"
    page.parent.mkdir(parents=True)
    (site / "static" / "images").mkdir(parents=True)
    (site / "static" / "images" / "favicon.ico").write_bytes(b"")
    page.write_text(
        "<html><head>"
        '<script src="https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js" '
        'integrity="sha384-abc" crossorigin="anonymous"></script>'
        '<link rel="stylesheet" href="https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css">'
        '<link rel="shortcut icon" href="../../../static/images/favicon.ico"/>'
        "<style>.brand { background: url('https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/"
        "full_logo_dark.png') 0 0 no-repeat; }</style>"
        '<script src="https://cdn.unknown.example/new.js"></script>'
        '</head><body><a href="https://greatexpectations.io">Great Expectations</a>'
        '<img src="data:image/png;base64,AAAA"></body></html>'
    )
    left = assets.rewrite_page(page, site, manifest)
    text = page.read_text()
    assert left == ["https://cdn.unknown.example/new.js"]  # not in the manifest: reported, not hidden
    assert (
        '<script src="../../../../static/vendor/bootstrap@4.3.1/dist/js/bootstrap.min.js"></script>' in text
    )
    assert 'href="../../../../static/vendor/@fortawesome/fontawesome-free@6.6.0/css/all.min.css"' in text
    assert 'href="../../../../static/images/favicon.ico"' in text  # GX's path was one level short
    assert "url('../../../../static/images/logo-long.png')" in text
    assert "<a>Great Expectations</a>" in text and "integrity" not in text and "crossorigin" not in text
    assert assets.rewrite_page(page, site, manifest) == left and page.read_text() == text  # idempotent
