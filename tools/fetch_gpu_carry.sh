#!/usr/bin/env bash
# Fetch what the GPU scripts (bench/*_gpu.py) carry to the lent H200 machines: cp312 wheels of sglang 0.5.23 and the
# pure-python packages it imports there, plus flashinfer 0.7.2's C++ headers (SGLang JIT-compiles its speculative
# sampling kernel against them). The list is ../shared/docs/sglang-on-h200.md's, less jedi and parso (5 MB: IPython 9
# imports jedi only for completions, and the device call's tree must stay under 64 MiB). Output: .carry/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.carry/whl
mkdir -p "$dest"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform any)
pkgs=(sglang==0.5.23 annotated-types apache-tvm-ffi==0.1.11 asttokens cffi compressed-tensors==0.18.0 decorator dill
      distro executing fastapi opentelemetry-api gguf httpcore2 httpx2 ipython ipython-pygments-lexers jiter
      jsonschema jsonschema-specifications loguru matplotlib-inline msgspec openai==2.8.0 orjson
      partial-json-parser pexpect prompt_toolkit ptyprocess pure_eval pybase64 pycparser pydantic==2.14.4
      pydantic-core==2.50.5 python-multipart pyzmq referencing rpds-py setproctitle sniffio soundfile stack_data
      starlette traitlets truststore typing-extensions typing-inspection uvicorn wcwidth xgrammar==0.2.7)
for p in "${pkgs[@]}"; do
  name=${p%%==*}; norm=$(echo "$name" | tr '-' '_' | tr 'A-Z' 'a-z')
  ls "$dest" | tr 'A-Z' 'a-z' | grep -q "^${norm}-" && continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d "$dest" "$p"
done
if [ ! -f .carry/flashinfer_include.tar.gz ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" flashinfer-python==0.7.2
  (cd "$tmp" && unzip -q flashinfer_python-*.whl 'flashinfer/data/include/*' && tar czf flashinfer_include.tar.gz flashinfer)
  mv "$tmp/flashinfer_include.tar.gz" .carry/
  rm -rf "$tmp"
fi
du -sh .carry
