#!/bin/sh
# lxcfix as a Proxmox VE hookscript: checks a container's device rules against
# the host's current device majors before it starts.
#
#   install -m 0755 lxcfix-hook.sh /var/lib/vz/snippets/lxcfix-hook.sh
#   pct set <vmid> --hookscript local:snippets/lxcfix-hook.sh
#
# Proxmox runs it as `lxcfix-hook.sh <vmid> <phase>`. --mode fail refuses the
# start and says what to run; --mode heal fixes the config (backup + journal)
# and lets the container start with the fix.
exec lxcfix hook --mode fail "$@"
