#!/usr/bin/env bash
# Fetch what bench/deploy_gpu.py (issue #16: `ddtctl deploy` over SSH on the lent H200) carries. The GPU image has
# Ubuntu 24.04 (glibc 2.39), Python 3.12 with torch/triton, no sshd, no ssh client, no paramiko, no network.
# Output: .carry/deploy/ (git-ignored):
#   wheels.tar.xz  whl/  the SGLang 0.5.23 set of tools/fetch_gpu_carry.sh (run first; it fills .carry/whl);
#                  ctl/  ddtctl's own runtime deps the image lacks or may hold in other versions: paramiko and its
#                        compiled deps (cryptography, bcrypt, pynacl; cffi/pycparser and pydantic come from whl/),
#                        invoke, typer, click, rich, shellingham, annotated-doc -- the versions this repo's .venv has.
#                  Every wheel is re-zipped uncompressed so that one xz stream compresses the lot (~60 MB of wheels
#                  travel as ~38 MB; the 64 MiB a device call may carry would not hold them as plain wheels).
#   debs/          Debian 12 (glibc 2.36) openssh-server, openssh-client, openssh-sftp-server, and the libraries
#                  their binaries link that an Ubuntu 24.04 image may lack. bench/deploy_gpu.py unpacks them into its
#                  work dir (never into /) and uses a carried library only for a soname the image does not have.
# The device call carries `.carry/deploy` and `.carry/flashinfer_include.tar.gz` -- not .carry/whl.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/fetch_gpu_carry.sh >/dev/null
dest=.carry/deploy
ctldir=.carry/ctl  # raw wheels; they travel inside wheels.tar.xz only
mkdir -p "$ctldir" "$dest/debs"
plat=(--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform any)
ctl=(paramiko==5.1.0 cryptography==50.0.2 bcrypt==5.0.0 pynacl==1.6.2 invoke==3.0.3 typer==0.29.2 click==8.5.1
     rich==15.0.0 shellingham==1.5.4 annotated-doc==0.0.7)
for p in "${ctl[@]}"; do
  norm=$(echo "${p%%==*}" | tr '-' '_' | tr 'A-Z' 'a-z')
  ls "$ctldir" | tr 'A-Z' 'a-z' | grep -q "^${norm}-" && continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d "$ctldir" "$p"
done

# openssh + the libraries sshd/ssh/ssh-keygen link beyond what every Ubuntu 24.04 has (libc, libcrypt, libpam,
# libaudit, libselinux, libsystemd, zlib, ...). libssl3: the image's python has libcrypto.so.3 already, a fallback.
debs=(openssh-server openssh-client openssh-sftp-server libwrap0 libnsl2 libtirpc3 libgssapi-krb5-2 libkrb5-3
      libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libssl3)
missing=()
for d in "${debs[@]}"; do ls "$dest/debs/${d}_"*.deb >/dev/null 2>&1 || missing+=("$d"); done
if [ ${#missing[@]} -gt 0 ]; then
  (cd "$dest/debs" && apt-get download "${missing[@]}" 2>/dev/null) || \
    { apt-get update -qq && (cd "$dest/debs" && apt-get download "${missing[@]}"); }
fi
# every ELF in them must need glibc <= 2.39 (the image's)
tmp=$(mktemp -d)
for f in "$dest"/debs/*.deb; do dpkg-deb -x "$f" "$tmp"; done
worst=$(find "$tmp" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c \
  'objdump -T "$1" 2>/dev/null | grep -o "GLIBC_[0-9][0-9.]*"' _ {} \; | sort -uV | tail -1)
rm -rf "$tmp"
echo "newest glibc symbol the carried debs need: ${worst:-none}"
case "$worst" in GLIBC_2.4[0-9]*|GLIBC_2.[5-9]*|GLIBC_[3-9]*) echo "too new for glibc 2.39" >&2; exit 1 ;; esac

# one xz stream of uncompressed wheels (rebuilt when the wheel set changes)
list=$( (cd .carry && ls whl/*.whl ctl/*.whl) | sort)
if [ ! -f "$dest/wheels.tar.xz" ] || [ "$(cat "$dest/wheels.list" 2>/dev/null)" != "$list" ]; then
  stage=$(mktemp -d)
  python3 - "$stage" <<'EOF'
import os, sys, zipfile
stage = sys.argv[1]
for src_dir, sub in ((".carry/whl", "whl"), (".carry/ctl", "ctl")):
    os.makedirs(os.path.join(stage, sub), exist_ok=True)
    for name in sorted(os.listdir(src_dir)):
        if not name.endswith(".whl"):
            continue
        with zipfile.ZipFile(os.path.join(src_dir, name)) as zi, \
                zipfile.ZipFile(os.path.join(stage, sub, name), "w", zipfile.ZIP_STORED) as zo:
            for info in zi.infolist():
                out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                out.external_attr = info.external_attr
                zo.writestr(out, zi.read(info), compress_type=zipfile.ZIP_STORED)
EOF
  tar cf - -C "$stage" whl ctl | xz -9 -T0 > "$dest/wheels.tar.xz.tmp"
  mv "$dest/wheels.tar.xz.tmp" "$dest/wheels.tar.xz"
  echo "$list" > "$dest/wheels.list"
  rm -rf "$stage"
fi
du -sh "$dest"/wheels.tar.xz "$dest"/debs .carry/flashinfer_include.tar.gz
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
carry=$(du -cb "$dest"/wheels.tar.xz "$dest"/debs .carry/flashinfer_include.tar.gz | tail -1 | cut -f1)
echo "a device call would send $(( (tree + carry) / 1048576 )) MiB (tree $((tree / 1048576)) MiB + carry $((carry / 1048576)) MiB; limit 64)"
