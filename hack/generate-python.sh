#!/usr/bin/env bash
# Generates the Python client (messages and gRPC stubs) from proto/ into
# clients/python with Debian's protoc 3.21 and grpc_python_plugin
# (apt-get install protobuf-compiler protobuf-compiler-grpc). Without them
# the Python client is left as it is, and said so; CI installs them, so
# `make check-generated` there catches a stale client.
set -euo pipefail
cd "$(dirname "$0")/.."

out=clients/python
if ! command -v protoc >/dev/null || ! command -v grpc_python_plugin >/dev/null; then
  if [[ "${CI:-}" == "true" ]]; then
    echo "generate-python: protoc and grpc_python_plugin are needed (apt-get install protobuf-compiler protobuf-compiler-grpc)" >&2
    exit 1
  fi
  echo "generate-python: protoc or grpc_python_plugin not installed: $out not regenerated (apt-get install protobuf-compiler protobuf-compiler-grpc)"
  exit 0
fi
rm -rf "$out/plexus"
mapfile -t protos < <(cd proto && find plexus -name '*.proto' | sort)
protoc -I proto --python_out="$out" --grpc_python_out="$out" --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" "${protos[@]}"
# Packages, so that `import plexus.allocator.v1.allocator_pb2` works from
# an installed copy as well as from a checkout.
find "$out/plexus" -type d -exec touch {}/__init__.py \;
