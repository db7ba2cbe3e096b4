#!/bin/sh
# lxcfix as a Proxmox VE hookscript: checks a container's device rules against
# the host's current device majors before it starts.
#
#   install -m 0755 lxcfix-hook.sh /var/lib/vz/snippets/lxcfix-hook.sh
#   pct set <vmid> --hookscript local:snippets/lxcfix-hook.sh
#
# Proxmox runs it as `lxcfix-hook.sh <vmid> <phase>`, with PATH=/sbin:/bin:/usr/sbin:/usr/bin
# (no /usr/local/bin), so the lines below name lxcfix by its absolute path: the README's
# install puts it in /usr/local/bin, and `lxcfix hook --print-snippet` writes the path
# lxcfix runs from. --mode fail refuses the
# start and says what to run; --mode heal fixes the config (backup + journal)
# and lets the container start with the fix.
#
# The hook must never be the reason a guest cannot start: on a host without
# lxcfix (a restore or migration onto another node) it lets the start go on.
# The snippet itself must exist on every node the container may start on
# (`local:` is per node): `lxcfix scan` reports a missing one (LXF152).
command -v /usr/local/bin/lxcfix >/dev/null 2>&1 || { echo "lxcfix hook: /usr/local/bin/lxcfix is not installed on $(hostname); not checking CT $1" >&2; exit 0; }
exec /usr/local/bin/lxcfix hook --mode fail "$@"
