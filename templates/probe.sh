# lxcfix in-container probe. It reads; it never creates, changes or removes a file.
# Run as: sh -c "$SCRIPT" lxcfix-probe /dev/x /dev/y ...  (busybox sh, dash, bash)
# The paths arrive as arguments: nothing from a config is pasted into this text.
# Output, one fact a line (lxcfix.probe.parse reads it):
#   lxcfix-probe 1
#   node <path> exists=0|1 char=0|1 major=N|- minor=N|- open=ok|EPERM|EACCES|ENXIO|ENOENT|ENODEV|...
#   gpu skipped <why>                 (GPU calls left out: they could have created device nodes)
#   nvidia_smi rc=N                   then "nvidia_smi_out <line>" for each line nvidia-smi -L printed
#   cuinit <code>                     cuInit(0) via python3 + ctypes
#   driver <version> <where seen>     container userspace driver
#   group <name> <gid>                render/video group ids (/etc/group): what devN gid= must say
#   perm uid=U gid=G mode=OOOO <path>                      owner and mode of a node inside
#   agroup <spec> gid=N|- name=NAME|- members=USER:UID,...|-   a group asked about, its members
#   access <spec> uid=U|- gid=G|- user=NAME|- open=ok|ERRNO|untried via=python3|setpriv|- why=WORD|- <path>
#                                     open(O_RDWR) as a member of that group (see "Group access")
#   inner docker|podman|runc <id>|- <name>   a running container of its own (lxcfix.nested)
#   end
# Arguments before the paths, "access:<group name or gid>:<path>", ask for the group-access check.

have() { command -v "$1" >/dev/null 2>&1; }
T=
timeout 15 true 2>/dev/null && T="timeout 15"  # old busybox wants -t: then no timeout
echo "lxcfix-probe 1"

# "access:<spec>:<path>" arguments come first (lxcfix.probe.probe_argv); the paths follow.
ACCESS=
while [ $# -gt 0 ]; do
    case $1 in
        access:*) ACCESS="$ACCESS${1#access:}
" ; shift ;;
        *) break ;;
    esac
done

# The nodes, in python3: stat() and open(O_RDWR|O_NOCTTY|O_NONBLOCK), never O_CREAT.
PY_NODES='
import errno, os, stat, sys
for p in sys.argv[1:]:
    e, c, mj, mn = 0, 0, "-", "-"
    try:
        st = os.stat(p)
    except OSError as x:
        o = errno.errorcode.get(x.errno, "other")
    else:
        e, c = 1, int(stat.S_ISCHR(st.st_mode))
        if c or stat.S_ISBLK(st.st_mode):
            mj, mn = os.major(st.st_rdev), os.minor(st.st_rdev)
        try:
            os.close(os.open(p, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))
            o = "ok"
        except OSError as x:
            o = errno.errorcode.get(x.errno, "other")
    print("node %s exists=%d char=%d major=%s minor=%s open=%s" % (p, e, c, mj, mn, o))
'

# The same without python3. Only an existing path is opened: "<>" would create a missing one.
open_rw() {
    if err=$( { $T sh -c 'exec 3<>"$1"' lxcfix-open "$1"; } 2>&1 ); then echo ok; return; fi
    case $err in
        *"Operation not permitted") echo EPERM ;;
        *"Permission denied") echo EACCES ;;
        *"No such device or address") echo ENXIO ;;
        *"No such device") echo ENODEV ;;
        *"No such file or directory") echo ENOENT ;;
        *"Is a directory") echo EISDIR ;;
        *) echo other ;;
    esac
}
node_sh() {
    e=0 c=0 mj=- mn=- o=ENOENT
    if [ -e "$1" ]; then
        e=1
        [ -c "$1" ] && c=1
        if [ -c "$1" ] || [ -b "$1" ]; then
            set -- "$1" $(stat -L -c '%t %T' "$1" 2>/dev/null)
            case "$2:$3" in *[!0-9a-f:]* | :* | *:) ;; *) mj=$((0x$2)) mn=$((0x$3)) ;; esac
        fi
        o=$(open_rw "$1")
    fi
    printf 'node %s exists=%s char=%s major=%s minor=%s open=%s\n' "$1" "$e" "$c" "$mj" "$mn" "$o"
}

if have python3 && python3 -I -B -c "$PY_NODES" "$@" 2>/dev/null; then :; else
    for p in "$@"; do node_sh "$p"; done
fi

# GPU calls. Run as root, libcuda and NVML create, replace or chmod any NVIDIA node they
# find missing or "wrong" (measured: cuInit re-created a missing /dev/nvidia-uvm and replaced a
# regular file there; nvidia-smi -L re-created /dev/nvidia0 and /dev/nvidia-caps/*). So they run
# only when every node the driver wants is already right, or the driver may not touch nodes.
N=/proc/driver/nvidia
param() {  # param KEY FILE: the value of a "Key: value" line
    while IFS=: read -r k v; do [ "$k" = "$1" ] && { echo $v; return; }; done < "$2"
}
chrmajor() {  # chrmajor NAME: its major in /proc/devices
    while read -r m name; do [ "$name" = "$1" ] && { echo "$m"; return; }; done < /proc/devices
}
isnum() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }
ishex() { case $1 in '' | *[!0-9a-f]*) return 1 ;; esac; }
want() {  # want PATH MAJOR MINOR MODE: print PATH unless it already is that char device, mode, owner
    isnum "$2" && isnum "$3" || { echo "$1"; return; }
    set -- "$1" "$2:$3" "$(printf %o "$4" 2>/dev/null)" $(stat -L -c '%f %t %T %a %u %g' "$1" 2>/dev/null)
    ishex "$4" && ishex "$5" && ishex "$6" && [ $((0x$4 & 0170000)) = 8192 ] &&
        [ "$2" = "$((0x$5)):$((0x$6))" ] || { echo "$1"; return; }
    [ "$8" = "$OVERFLOW" ] || [ "$7 $8 $9" = "$3 $UID0 $GID0" ] || echo "$1"  # unmapped owner: chmod fails
}
gpu_blocker() {  # the first node the driver would change, or nothing
    [ -r $N/params ] || { echo "$N/params unreadable"; return; }
    [ "$(param ModifyDeviceFiles $N/params)" = 0 ] && return
    MODE=$(param DeviceFileMode $N/params) UID0=$(param DeviceFileUID $N/params)
    GID0=$(param DeviceFileGID $N/params) OVERFLOW=$(cat /proc/sys/kernel/overflowuid 2>/dev/null)
    uvm=$(chrmajor nvidia-uvm) caps=$(chrmajor nvidia-caps)
    {
        want /dev/nvidiactl 195 255 "$MODE"
        for f in $N/gpus/*/information; do
            [ -f "$f" ] || continue
            m=$(param 'Device Minor' "$f"); want "/dev/nvidia$m" 195 "$m" "$MODE"
        done
        if [ -n "$uvm" ]; then want /dev/nvidia-uvm "$uvm" 0 "$MODE"; want /dev/nvidia-uvm-tools "$uvm" 1 "$MODE"; fi
        for f in $N/capabilities/mig/* $N/capabilities/gpu*/mig/gi*/access $N/capabilities/gpu*/mig/gi*/ci*/access; do
            [ -f "$f" ] && [ "$(param DeviceFileModify "$f")" != 0 ] || continue
            m=$(param DeviceFileMinor "$f"); want "/dev/nvidia-caps/nvidia-cap$m" "$caps" "$m" "$(param DeviceFileMode "$f")"
        done
    } | { read -r first; echo "$first"; }
}

PY_CUINIT='
import ctypes
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    raise SystemExit(0)
print("cuinit %d" % cuda.cuInit(0))
'

blocker=
if ! have nvidia-smi && ! [ -d $N ]; then
    blocker="no NVIDIA driver"  # nothing to call; not reported
elif blocker=$(gpu_blocker 2>/dev/null) && [ -n "$blocker" ]; then
    printf 'gpu skipped %s\n' "$blocker"
else
    if have nvidia-smi; then
        out=$($T nvidia-smi -L 2>&1)
        echo "nvidia_smi rc=$?"
        [ -n "$out" ] && printf '%s\n' "$out" | while IFS= read -r l; do printf 'nvidia_smi_out %s\n' "$l"; done
    fi
    # CUDA writes a JIT cache under $HOME/.nv at cuInit: point it nowhere writable.
    have python3 && CUDA_CACHE_DISABLE=1 CUDA_CACHE_PATH=/proc/lxcfix-nocache $T python3 -I -B -c "$PY_CUINIT" 2>/dev/null
fi

# The container's userspace driver version: the file libcuda.so.1 / libnvidia-ml.so.1 lead to
# (what the loader opens), else any real libcuda.so.<version> file.
driver=
for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /lib64 /lib \
         /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu/nvidia/current; do
    for f in "$d/libcuda.so.1" "$d/libnvidia-ml.so.1" "$d"/libcuda.so.*.* "$d"/libnvidia-ml.so.*.*; do
        [ -L "$f" ] && f=$(readlink -f "$f" 2>/dev/null)
        case ${f##*/} in lib*.so.[0-9]*.[0-9]*) [ -f "$f" ] && { driver="${f##*.so.} $f"; break 2; } ;; esac
    done
done
if [ -z "$driver" ] && [ -z "$blocker" ] && have nvidia-smi; then
    v=$($T nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null) && v=${v%%[!0-9.]*}
    case $v in [0-9]*) driver="$v nvidia-smi" ;; esac
fi
[ -n "$driver" ] && printf 'driver %s\n' "$driver"

# The container's own ids of the groups GPU nodes belong to (they differ between distributions).
if [ -r /etc/group ]; then
    while IFS=: read -r gname _ gid _; do
        case $gname in render|video) case $gid in *[!0-9]*|'') ;; *) printf 'group %s %s\n' "$gname" "$gid" ;; esac ;; esac
    done < /etc/group
fi

# Group access: who inside may open the nodes. Reads /etc/group and /etc/passwd, stats the
# nodes, and tries each open as a member of the group in a child that drops to that uid and
# gid first (python3: fork + setgroups/setgid/setuid; else setpriv): nothing inside changes.
# The user is the group's first member with a uid other than 0, else uid 65534 in that group.
PY_ACCESS='
import errno, os, stat, sys
def table(path):
    try:
        with open(path, errors="replace") as f:
            return [l.rstrip("\n").split(":") for l in f]
    except OSError:
        return []
groups, users = table("/etc/group"), table("/etc/passwd")
def number(text):
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None
def lookup(spec):
    for g in groups:
        if len(g) >= 4 and (g[0] == spec or g[2] == spec) and number(g[2]) is not None:
            members = [m for m in g[3].split(",") if m]
            members += [u[0] for u in users if len(u) >= 4 and u[3] == g[2] and u[0] not in members]
            uids = {u[0]: number(u[2]) for u in users if len(u) >= 4}
            return g[0], number(g[2]), [(m, uids.get(m)) for m in members][:32]
    return None
found, stated = {}, set()
for arg in sys.argv[1:]:
    spec, _, path = arg.partition(":")
    if spec not in found:
        found[spec] = hit = lookup(spec)
        if hit is None:
            print("agroup %s gid=- name=- members=-" % spec)
        else:
            text = ",".join("%s:%s" % (m, "-" if u is None else u) for m, u in hit[2]) or "-"
            print("agroup %s gid=%d name=%s members=%s" % (spec, hit[1], hit[0], text))
    untried = "access %s uid=- gid=- user=- open=untried via=- why=%%s %s" % (spec, path)
    try:
        st = os.stat(path)
    except OSError as x:
        print(untried % errno.errorcode.get(x.errno, "other"))
        continue
    if path not in stated:
        stated.add(path)
        print("perm uid=%d gid=%d mode=%04o %s" % (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), path))
    if found[spec] is None or not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        print(untried % ("no-group" if found[spec] is None else "not-a-device"))
        continue
    name, gid, members = found[spec]
    user, uid = next(((m, u) for m, u in members if u), ("-", 65534))
    pid = os.fork()
    if pid == 0:
        code = 254
        try:
            os.setgroups([gid])
            os.setgid(gid)
            os.setuid(uid)
            code = 253
            os.close(os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))
            code = 0
        except OSError as x:
            if code == 253 and 0 < x.errno < 250:
                code = x.errno
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 255
    if code == 254 or code == 255:
        print(untried % ("cannot-drop" if code == 254 else "child-died"))
        continue
    result = "ok" if code == 0 else errno.errorcode.get(code, "other")
    print("access %s uid=%d gid=%d user=%s open=%s via=python3 why=- %s" % (spec, uid, gid, user, result, path))
'

# The same without python3, with setpriv (util-linux); without either the opens are not tried.
errname() {  # errname MESSAGE: the errno name a shell's "can't open" message stands for
    case $1 in
        *"Operation not permitted") echo EPERM ;;
        *"Permission denied") echo EACCES ;;
        *"No such device or address") echo ENXIO ;;
        *"No such device") echo ENODEV ;;
        *"No such file or directory") echo ENOENT ;;
        *) echo other ;;
    esac
}
group_line() {  # group_line SPEC: "name gid members" of the group named or numbered SPEC
    while IFS=: read -r gn _ gi gm; do
        case $gi in '' | *[!0-9]*) continue ;; esac
        if [ "$gn" = "$1" ] || [ "$gi" = "$1" ]; then echo "$gn $gi $gm"; return; fi
    done < /etc/group
}
uid_of() {
    while IFS=: read -r un _ ui _; do
        [ "$un" = "$1" ] && case $ui in '' | *[!0-9]*) ;; *) echo "$ui"; return ;; esac
    done < /etc/passwd
}
access_sh() {  # access_sh SPEC PATH
    set -- "$1" "$2" $(group_line "$1" 2>/dev/null)
    if [ -z "$4" ]; then
        echo "agroup $1 gid=- name=- members=-"
        echo "access $1 uid=- gid=- user=- open=untried via=- why=no-group $2"; return
    fi
    gname=$3 gid=$4 members=$(printf '%s' "$5" | tr ',' ' ')
    if [ -r /etc/passwd ]; then
        while IFS=: read -r un _ _ ug _; do
            [ "$ug" = "$gid" ] && case " $members " in *" $un "*) ;; *) members="$members $un" ;; esac
        done < /etc/passwd
    fi
    list= user=- uid=65534
    for m in $members; do
        u=$(uid_of "$m"); list="$list,$m:${u:--}"
        [ "$user" = - ] && [ -n "$u" ] && [ "$u" != 0 ] && user=$m uid=$u
    done
    list=${list#,}
    echo "agroup $1 gid=$gid name=$gname members=${list:--}"
    if ! [ -c "$2" ] && ! [ -b "$2" ]; then
        echo "access $1 uid=- gid=- user=- open=untried via=- why=not-a-device $2"; return
    fi
    if ! have setpriv; then
        echo "access $1 uid=- gid=- user=- open=untried via=- why=no-python3-or-setpriv $2"; return
    fi
    # The shell says "lxcfix-in" once it runs as the member: without it, setpriv itself failed.
    err=$( { $T setpriv --reuid="$uid" --regid="$gid" --groups="$gid" sh -c 'echo lxcfix-in; exec 3<>"$1"' \
        lxcfix-open "$2"; } 2>&1 )
    rc=$?
    case $err in
        lxcfix-in*) ;;
        *) echo "access $1 uid=- gid=- user=- open=untried via=- why=setpriv-failed $2"; return ;;
    esac
    if [ "$rc" = 0 ]; then o=ok; else o=$(errname "$err"); fi
    echo "access $1 uid=$uid gid=$gid user=$user open=$o via=setpriv why=- $2"
}
perm_sh() {  # stat's %a is octal digits without leading zeros: padded to four
    set -- "$1" $(stat -L -c '%u %g %a' "$1" 2>/dev/null)
    case "$2:$3:$4" in *[!0-9:]* | *::* | :* | *:) return ;; esac
    m=000$4
    printf 'perm uid=%s gid=%s mode=%s %s\n' "$2" "$3" "${m#"${m%????}"}" "$1"
}

if [ -n "$ACCESS" ]; then
    set -f; old_ifs=$IFS; IFS='
'
    set -- $ACCESS
    IFS=$old_ifs
    # A python3 that runs but prints nothing (a stub) counts as none.
    if have python3 && out=$(python3 -I -B -c "$PY_ACCESS" "$@" 2>/dev/null) && [ -n "$out" ]; then
        printf '%s\n' "$out"
    else
        stated='
'
        for a in "$@"; do
            p=${a#*:}
            case $stated in *"
$p
"*) ;; *) [ -e "$p" ] && perm_sh "$p"; stated="$stated$p
" ;; esac
            access_sh "${a%%:*}" "$p"
        done
    fi
    set +f
fi

# Containers this container runs itself (Docker, Podman, runc): only where a daemon's socket or a
# runtime's state dir says some may run, so nothing is created (lxcfix.nested.listed reads it).
# Each at most 5 s: a daemon that does not answer must not eat the probe's whole deadline.
TI=
timeout 5 true 2>/dev/null && TI="timeout 5"
if { [ -S /run/docker.sock ] || [ -S /var/run/docker.sock ]; } && have docker; then
    $TI docker ps --no-trunc --format 'inner docker {{.ID}} {{.Names}}' </dev/null 2>/dev/null
fi
if { [ -d /run/libpod ] || [ -d /run/containers/storage ]; } && have podman; then
    $TI podman ps --no-trunc --format 'inner podman {{.ID}} {{.Names}}' </dev/null 2>/dev/null
fi
if [ -d /run/runc ] && have runc; then
    $TI runc --root /run/runc list -q </dev/null 2>/dev/null | while read -r id; do echo "inner runc - $id"; done
fi

echo end
