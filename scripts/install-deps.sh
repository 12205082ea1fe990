#!/usr/bin/env bash
# Installs every Debian package Trainyard needs to build, test and run.
# LibTorch is not among them: it comes from PyPI's torch (scripts/pyenv.sh).
# Idempotent: packages already present are left alone. Uses sudo when not root.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates curl procps iproute2 python3 openssl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  grpc-proto prometheus-cpp-dev libsqlite3-dev libcurl4-openssl-dev libyaml-cpp-dev libssl-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libgtest-dev libgmock-dev libxxhash-dev zlib1g-dev
  libjpeg62-turbo-dev libpng-dev
  clang clang-format libclang-rt-dev libgloo-dev python3-grpcio python3-numpy python3-venv
  prometheus python3-yaml patchelf libre2-dev
  libjs-chart.js libcivetweb-dev chromium chromium-driver libpq-dev postgresql-15
  fuse3 python3-fusepy
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Keep package scripts from starting services (the prometheus package would
# start a Prometheus on :9090): invoke-rc.d honours a policy-rc.d that exits 101.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  $SUDO sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
