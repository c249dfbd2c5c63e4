#!/usr/bin/env bash
# Build the guest initramfs (busybox + our binaries + scenarios + kernel modules).
# usage: scripts/image.sh OUT.cpio.gz [--bin PATH]... [--lib-dir DIR]... [--mpi] [--openmpi] [--scenarios DIR]
#
# --bin PATH     the executable to /usr/bin, with the shared libraries ldd lists
# --lib-dir DIR  a directory of run-time plugins (dlopen()ed, so ldd of the
#                binaries does not see them) copied to the same path, with the
#                libraries every .so in it needs
# --mpi          what MPI programs built with MPICH (ch4:ucx) load at run time
#                besides their ldd libraries: UCX's transport modules (UCX's
#                module directory) and hwloc's plugins if the host has any.
#                The programs themselves come with --bin (scripts/lib.sh
#                build_image --mpi does both). UCX needs no configuration in
#                the guests (no /etc/ucx/ucx.conf): with its defaults it
#                takes tcp over eth0 to other nodes and self/sysv/posix/cma
#                shared memory on the node (/dev/shm is mounted by init); it
#                leaves lo alone for remote peers. A user's UCX_* and
#                MPIR_CVAR_* variables reach the ranks (`gang run` passes the
#                environment on).
# --openmpi      what Open MPI programs (mpicc.openmpi, Debian's hpcc) load at
#                run time besides their ldd libraries: Open MPI's MCA plugins
#                (openmpi3/), libpmix's plugins, hwloc's plugins, and the
#                two configuration files (Open MPI's MCA defaults, which
#                leave UCX, openib and ofi alone, and libpmix's) and their
#                help texts (what their error messages print). The PMIx
#                server (gang-pmix-server) comes with --bin (docs/pmix.md).
#
# Every node of a cluster boots the same image. When gangd is among the
# binaries, the image holds a cluster CA made for this build (`gangd ca
# init`: /etc/gangd/ca, keys 0600) and a certificate for each of node0 ..
# node$IMAGE_NODES-1 (`gangd ca issue`: /etc/scx_gang/tls/nodeN); a
# scenario starts node N with --tls-dir /etc/scx_gang/tls/nodeN. Users for
# jobs: root, alice (1000:1000), bob (1001:1001).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
    echo "usage: $0 OUT.cpio.gz [--bin PATH]... [--lib-dir DIR]... [--mpi] [--openmpi] [--scenarios DIR]" >&2
    exit 2
}

OUT= SCEN= MPI=0 OMPI=0
BINS=() LIBDIRS=()
while (($#)); do
    case $1 in
    --bin) (($# >= 2)) || usage; BINS+=("$2"); shift 2 ;;
    --lib-dir) (($# >= 2)) || usage; LIBDIRS+=("$2"); shift 2 ;;
    --mpi) MPI=1; shift ;;
    --openmpi) OMPI=1; shift ;;
    --scenarios) (($# >= 2)) || usage; SCEN=$2; shift 2 ;;
    -h | --help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) [[ -z $OUT ]] || usage; OUT=$1; shift ;;
    esac
done
[[ -n $OUT ]] || usage
need_cmd busybox cpio gzip ldd
need_kernel
[[ -z $SCEN || -d $SCEN ]] || die "scenarios dir $SCEN does not exist"
for b in "${BINS[@]}"; do [[ -f $b && -x $b ]] || die "--bin $b is not an executable file"; done
if ((MPI)); then
    # UCX loads its transport modules from the directory "ucx" next to
    # libucs (Debian: cma for single-copy shared memory, ib and rdmacm,
    # which find no device in the guest and stay idle); hwloc its plugins
    # from "hwloc" next to libhwloc, when the host has that package.
    # (ldconfig is in /sbin, off a normal user's PATH on Debian; awk reads
    # all of its output: ldconfig killed by SIGPIPE would fail the pipeline.)
    LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)
    LIBUCS=$("$LDCONFIG" -p | awk '!f && $1 == "libucs.so.0" && $NF ~ /^\// {print $NF; f = 1}')
    [[ -n $LIBUCS ]] || die "--mpi: libucs.so.0 not found (install mpich: run scripts/setup.sh)"
    LIBUCS=$(readlink -f "$LIBUCS")
    [[ -d $(dirname "$LIBUCS")/ucx ]] || die "--mpi: no UCX module directory next to $LIBUCS"
    LIBDIRS+=("$(dirname "$LIBUCS")/ucx")
    LIBHWLOC=$("$LDCONFIG" -p | awk '!f && $1 ~ /^libhwloc\.so\./ && $NF ~ /^\// {print $NF; f = 1}')
    if [[ -n $LIBHWLOC && -d $(dirname "$(readlink -f "$LIBHWLOC")")/hwloc ]]; then
        LIBDIRS+=("$(dirname "$(readlink -f "$LIBHWLOC")")/hwloc")
    fi
fi
OMPI_FILES=()
if ((OMPI)); then
    MULTIARCH=/usr/lib/x86_64-linux-gnu
    for d in "$MULTIARCH/openmpi/lib/openmpi3" "$MULTIARCH/pmix2/lib/pmix" "$MULTIARCH/hwloc"; do
        [[ -d $d ]] || die "--openmpi: $d missing (install openmpi-bin libpmix-dev: run scripts/setup.sh)"
        [[ " ${LIBDIRS[*]} " == *" $d "* ]] || LIBDIRS+=("$d")
    done
    # (and the help texts both print their errors from)
    OMPI_FILES=(/etc/openmpi/openmpi-mca-params.conf "$MULTIARCH/pmix2/share" /usr/share/openmpi)
    for f in "${OMPI_FILES[@]}"; do [[ -e $f ]] || die "--openmpi: $f missing (run scripts/setup.sh)"; done
fi
for d in "${LIBDIRS[@]}"; do [[ -d $d && $d == /* ]] || die "--lib-dir $d is not an absolute path to a directory"; done
BUSYBOX=$(command -v busybox)
file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' ||
    ldd "$BUSYBOX" 2>&1 | grep -q 'not a dynamic' || die "$BUSYBOX is not static (install busybox-static)"
FUSERMOUNT=$(command -v fusermount3) || die "fusermount3 missing (install fuse3)"

VER=$(cat "$KERNEL_DIR/version")
ST=$(mktemp -d "${TMPDIR:-/tmp}/scx_gang_image.XXXXXX")
trap 'rm -rf "$ST"' EXIT
step "staging initramfs in $ST (kernel $VER)"

# Merged-/usr layout, like the host, so ldd's paths land in the right place.
mkdir -p "$ST"/usr/{bin,lib/modules-ko,lib64} "$ST"/var/tmp \
    "$ST"/{dev,proc,sys,tmp,run,results,scenarios,root,etc,mnt,boot}
ln -s usr/bin "$ST/bin"
ln -s usr/bin "$ST/sbin"
ln -s bin "$ST/usr/sbin"
ln -s usr/lib "$ST/lib"
ln -s usr/lib64 "$ST/lib64"
chmod 1777 "$ST/tmp" "$ST/var/tmp"

# busybox and its applets
cp "$BUSYBOX" "$ST/usr/bin/busybox"
for a in $("$BUSYBOX" --list); do
    [[ $a == busybox ]] || ln -s busybox "$ST/usr/bin/$a"
done

# copy_libs FILE: the shared libraries FILE needs and the loader, at their paths
copy_libs() {
    local lib
    # "libx.so => /path (0x..)" and "/lib64/ld-linux-x86-64.so.2 (0x..)"; static: no paths
    for lib in $(ldd "$1" 2>/dev/null | awk '$2=="=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
        [[ -e $ST$lib ]] && continue
        mkdir -p "$ST$(dirname "$lib")"
        cp -L "$lib" "$ST$lib"
    done
}

# copy_bin SRC: the executable to /usr/bin plus its shared libraries and loader
copy_bin() {
    local src=$1 dst=$ST/usr/bin/${1##*/}
    rm -f "$dst"
    cp -L "$src" "$dst"
    chmod 0755 "$dst"
    copy_libs "$src"
}

# copy_lib_dir DIR: DIR as it is (files and symlinks, same path) plus the
# libraries of every shared object in it.
copy_lib_dir() {
    local dir=$1 f
    mkdir -p "$ST$dir"
    cp -a "$dir/." "$ST$dir/"
    # Static archives and libtool files are for linking, not for running.
    find "$ST$dir" \( -name '*.a' -o -name '*.la' \) -delete
    for f in "$dir"/*.so*; do
        [[ -f $f && ! -L $f ]] && copy_libs "$f"
    done
    return 0
}
copy_bin "$FUSERMOUNT"
# iproute2's ip over busybox's: the init sets quickack on the cluster route,
# which busybox's ip cannot (docs/timed-switching.md, "Delayed ACKs").
IPROUTE=$(command -v ip) || die "iproute2's ip is missing (scripts/setup.sh installs it)"
copy_bin "$IPROUTE"
for b in "${BINS[@]}"; do
    step "adding $b"
    copy_bin "$b"
done
for d in "${LIBDIRS[@]}"; do
    step "adding $d ($(find "$d" -name '*.so*' -type f | wc -l) shared objects)"
    copy_lib_dir "$d"
done

for f in "${OMPI_FILES[@]}"; do
    mkdir -p "$ST$(dirname "$f")"
    cp -rL "$f" "$ST$f"
done

# kernel modules (decompressed by setup.sh) and the config libbpf reads
cp "$KERNEL_DIR"/modules/* "$ST/lib/modules-ko/"
cp "$KERNEL_DIR/config" "$ST/boot/config-$VER"

# scenarios
if [[ -n $SCEN ]]; then
    n=0
    for s in "$SCEN"/*.sh; do
        [[ -f $s ]] || continue
        install -m 0755 "$s" "$ST/scenarios/"
        n=$((n + 1))
    done
    step "added $n scenario(s) from $SCEN"
fi

install -m 0755 "$SCRIPTS_DIR/vm/init" "$ST/init"
cat >"$ST/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
alice:x:1000:1000:alice:/home/alice:/bin/sh
bob:x:1001:1001:bob:/home/bob:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$ST/etc/group" <<'GROUP'
root:x:0:
alice:x:1000:
bob:x:1001:
nogroup:x:65534:
GROUP
printf 'root::0:0:99999:7:::\nalice:!:0:0:99999:7:::\nbob:!:0:0:99999:7:::\n' >"$ST/etc/shadow"
chmod 0600 "$ST/etc/shadow"
# Home directories: the archive makes every file root's, so a scenario that
# needs them writable chowns them at run time.
mkdir -p "$ST/home/alice" "$ST/home/bob"
# The cluster CA and one certificate per node, made by the gangd packed
# into the image (fresh for every build).
GANGD_BIN=
for b in "${BINS[@]}"; do [[ $(basename "$b") == gangd ]] && GANGD_BIN=$b; done
if [[ -n $GANGD_BIN ]]; then
    mkdir -m 0700 "$ST/etc/gangd"
    "$GANGD_BIN" --ca-dir "$ST/etc/gangd/ca" ca init >/dev/null || die "gangd ca init failed"
    mkdir -p "$ST/etc/scx_gang/tls"
    for ((i = 0; i < ${IMAGE_NODES:-8}; i++)); do
        "$GANGD_BIN" --ca-dir "$ST/etc/gangd/ca" ca issue "node$i" --out "$ST/etc/scx_gang/tls/node$i" \
            >/dev/null || die "gangd ca issue node$i failed"
    done
fi
echo "$VER" >"$ST/etc/scx_gang-kernel"

# Pack: sorted names, fixed owner and mtime, no gzip timestamp -> same input, same
# bytes (but for the cluster CA and certificates, fresh in every build).
mkdir -p "$(dirname "$OUT")"
OUT_ABS=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
find "$ST" -exec touch -h -d @0 {} +
(cd "$ST" && find . -mindepth 1 | LC_ALL=C sort |
    cpio -o -H newc -R 0:0 --reproducible --quiet | gzip -n -6 >"$OUT_ABS.tmp")
mv "$OUT_ABS.tmp" "$OUT_ABS"
step "wrote $OUT ($(du -h "$OUT_ABS" | cut -f1))"
