#!/usr/bin/env bash
# For a GPU machine that cannot reach any package registry (this project's device
# machines): install what tests/gpu/run_on_gpu_host.sh needs from a carried folder.
#
#   tests/gpu/install_carried.sh DIR      then: export PYTHONPATH=/tmp/lxcfix-site
#
# DIR/lxc-root.tar.gz: Debian 12's lxc, liblxc1, liblxc-common, bpftool and their libraries,
#   `dpkg -x`ed into one tree (lib/ folded into usr/lib/), made with:
#     apt-get download lxc liblxc1 liblxc-common bpftool libapparmor1 libseccomp2 \
#       libselinux1 libcap2 libelf1 libpcre2-8-0 zlib1g
#     for f in *.deb; do dpkg -x $f root; done   (then move root/lib/* to root/usr/lib/)
#   Unpacked over / without replacing any existing file (the host's libraries win).
# DIR/whl/: wheels of lxcfix's dependencies (pip download ... typer rich jinja2 pyyaml
#   tenacity paramiko fabric), installed into /tmp/lxcfix-site.
set -eu
DIR=${1:?usage: install_carried.sh DIR}
if ! command -v lxc-start >/dev/null 2>&1 || ! command -v bpftool >/dev/null 2>&1; then
  tar -xzf "$DIR/lxc-root.tar.gz" -C / --skip-old-files --keep-directory-symlink --no-same-owner
  ldconfig
fi
mkdir -p /var/lib/lxc
python3 -m pip install -q --no-index --no-compile --disable-pip-version-check --find-links "$DIR/whl" \
  --target /tmp/lxcfix-site "typer>=0.12,<1" "rich>=13" "jinja2>=3.1" "pyyaml>=6" "tenacity>=8" \
  "paramiko>=3.4" "fabric>=3.2" 2>&1 | grep -v -e "^WARNING: Running pip as" -e "dependency resolver" || true
lxc-start --version && bpftool version | sed -n 1p
