"""The DDTREE integration payload for SGLang and its manager (`ddtctl overlay ...`).

    source.py          payload sources: manifest.json, patches, added files (ddtctl/payload/<name>-<sglang>/)
    udiff.py           strict unified diffs (exact apply, no fuzz)
    build.py           build(): pristine files + patches -> staged payload + dry-run view, base hashes checked
    installer.py       stdlib only, shipped by deploy: atomic install / exact uninstall / status / view
    smoke.py           smoke checks, run by the target interpreter (shipped with the payload)
    manage.py          install() / uninstall() / status() / verify() through the target interpreter
    importer.py        import_dir(): hand-patched SGLang files -> a payload; check_manifest()
    dryrun_support.py  which view `ddtctl dry-run --overlay auto|none|PATH` puts first on sys.path

Importing this package is light (nothing heavy is imported here).
"""
