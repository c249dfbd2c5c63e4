#!/usr/bin/env bash
# Install the host packages the test bed needs and fetch a sched_ext-capable kernel
# (Debian trixie-backports cloud kernel) into the cache. Idempotent; safe to rerun offline
# once a kernel is cached.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

HOST_PKGS=(clang-19 llvm-19 libelf-dev zlib1g-dev pkg-config qemu-system-x86 vde2
    busybox-static fuse3 libfuse3-dev xz-utils cpio iproute2 procps util-linux
    debian-archive-keyring mpich libmpich-dev netpipe-mpich2 libpmix-dev openmpi-bin libopenmpi-dev hpcc)
SUITE=trixie-backports
META=linux-image-cloud-amd64

SUDO=()
[[ $EUID -eq 0 ]] || SUDO=(sudo)

# ---- host packages ---------------------------------------------------------------------
missing=()
for p in "${HOST_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    step "installing host packages: ${missing[*]}"
    "${SUDO[@]}" apt-get update -q || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends \
        "${missing[@]}" || die "apt-get install failed"
else
    step "host packages already installed"
fi

# ---- the mirror the machine already uses -----------------------------------------------
# First Debian archive URI from the system's own apt sources (deb822 first, then one-line).
mirror_uri() {
    local f uri=
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        uri=$(awk '/^URIs:/{for(i=2;i<=NF;i++) if ($i !~ /security/) {print $i; exit}}' "$f")
        [[ -n $uri ]] && break
    done
    if [[ -z $uri ]]; then
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [[ -f $f ]] || continue
            uri=$(sed -E 's/\[[^]]*\]//' "$f" |
                awk '$1=="deb" && $2 !~ /security/ {print $2; exit}')
            [[ -n $uri ]] && break
        done
    fi
    [[ -n $uri ]] || die "no Debian mirror URI found in /etc/apt sources"
    printf '%s\n' "${uri%/}"
}

# ---- the guest's modules, decompressed, with their dependencies, in load order ---------
# Drivers and features the guest needs, as CONFIG symbol:module; the ones this
# config builds as modules are extracted (built-in ones need nothing): virtio
# for disk and network, inet_diag/tcp_diag for the drain barrier (sock_diag).
GUEST_MODULES="VIRTIO_PCI:virtio_pci VIRTIO_NET:virtio_net VIRTIO_BLK:virtio_blk INET_DIAG:inet_diag INET_TCP_DIAG:tcp_diag"

decompress() { # FILE -> stdout
    case $1 in
    *.ko.xz) xz -dc "$1" ;;
    *.ko.zst) zstd -qdc "$1" ;;
    *.ko.gz) gzip -dc "$1" ;;
    *.ko) cat "$1" ;;
    *) die "unknown module file $1" ;;
    esac
}

# extract_modules CONFIG TREE OUT: the wanted modules of TREE (a module
# directory, e.g. lib/modules/<ver>) into OUT, dependencies first (the
# package has no modules.dep: each module's "depends=" is read from its
# .modinfo), with OUT/order and OUT/.wanted (the list it was made for).
extract_modules() {
    local config=$1 tree=$2 out=$3 pair sym mod want=()
    for pair in $GUEST_MODULES; do
        sym=${pair%%:*} mod=${pair#*:}
        case $(sed -n "s/^CONFIG_$sym=//p" "$config") in
        y) ;;
        m) want+=("$mod") ;;
        *) die "kernel config has CONFIG_$sym neither =y nor =m" ;;
        esac
    done
    rm -rf "$out"
    mkdir -p "$out"
    declare -A seen=()
    : >"$out/order"
    visit() {
        local name=$1 file deps d
        [[ -n ${seen[$name]:-} ]] && return 0
        seen[$name]=1
        file=$(find "$tree/kernel" \( -name "$name.ko*" -o -name "${name//_/-}.ko*" \) | head -n1)
        [[ -n $file ]] || die "module $name not found in $tree"
        decompress "$file" >"$out/$name.ko"
        deps=$(tr '\0' '\n' <"$out/$name.ko" | sed -n 's/^depends=//p' | head -n1)
        for d in ${deps//,/ }; do visit "$d"; done
        echo "$name" >>"$out/order"
    }
    for mod in "${want[@]}"; do visit "$mod"; done
    echo "$GUEST_MODULES" >"$out/.wanted"
    step "guest modules (load order): $(tr '\n' ' ' <"$out/order")"
}

# refresh_modules VDIR: a cached kernel made for another module list gets its
# modules extracted again from the module tree it kept.
refresh_modules() {
    local vdir=$1
    if [[ "$(cat "$vdir/modules/.wanted" 2>/dev/null)" != "$GUEST_MODULES" ]]; then
        step "guest module list changed: extracting again from the kept module tree"
        extract_modules "$vdir/config" "$vdir/lib/$(cat "$vdir/version")" "$vdir/modules"
    fi
}

have_cached_kernel() { [[ -L $KERNEL_DIR && -f $KERNEL_DIR/.complete ]]; }

# ---- private apt state (never touches the system's apt configuration) ------------------
A=$CACHE/apt
mkdir -p "$A/sources" "$A/lists/partial" "$A/cache/archives/partial" "$A/debs"
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$(mirror_uri)" "$SUITE" >"$A/sources/backports.sources"
O=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$A/sources"
    -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o APT::Sandbox::User=root)

step "refreshing the $SUITE package list (private apt state in $A)"
if ! apt-get "${O[@]}" -q update >"$A/update.log" 2>&1 ||
    grep -qE '^(W|E): (Failed|Some index)' "$A/update.log"; then
    if have_cached_kernel; then
        warn "could not refresh $SUITE (offline?); keeping cached kernel $(cat "$KERNEL_DIR/version")"
        refresh_modules "$(readlink -f "$KERNEL_DIR")"
        exit 0
    fi
    cat "$A/update.log" >&2
    die "could not refresh $SUITE and no kernel is cached"
fi

VER=$(apt-cache "${O[@]}" depends "$META" 2>/dev/null |
    sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*\)$/\1/p' | head -n1)
[[ -n $VER ]] || die "could not resolve the kernel version $META depends on in $SUITE"
step "$META in $SUITE -> $VER"

VDIR=$CACHE/kernel/$VER
if [[ -f $VDIR/.complete ]]; then
    ln -sfn "$VER" "$CACHE/kernel/current"
    refresh_modules "$VDIR"
    step "kernel $VER already in $VDIR; nothing to do"
    exit 0
fi

# ---- download and extract --------------------------------------------------------------
PKGS=("linux-binary-unsigned-$VER" "linux-base-$VER" "linux-modules-$VER")
for p in "${PKGS[@]}"; do
    apt-cache "${O[@]}" show "$p" >/dev/null 2>&1 || die "package $p not found in $SUITE"
done
step "downloading ${PKGS[*]} (~40 MB)"
rm -f "$A/debs"/*.deb
(cd "$A/debs" && apt-get "${O[@]}" -qq download "${PKGS[@]}") || die "download failed"

TMP=$CACHE/kernel/.$VER.tmp
rm -rf "$TMP"
mkdir -p "$TMP/root" "$TMP/modules"
for deb in "$A/debs"/*.deb; do
    step "extracting $(basename "$deb")"
    dpkg-deb -x "$deb" "$TMP/root"
done

MODDIR=$TMP/root/usr/lib/modules/$VER
[[ -d $MODDIR ]] || MODDIR=$TMP/root/lib/modules/$VER
pick() { # first existing file among the arguments
    local f
    for f in "$@"; do [[ -f $f ]] && { printf '%s\n' "$f"; return 0; }; done
    return 1
}
KIMG=$(pick "$MODDIR/vmlinuz.unsigned" "$MODDIR/vmlinuz" "$TMP/root/boot/vmlinuz-$VER") ||
    die "no kernel image found in linux-binary-unsigned-$VER"
KCFG=$(pick "$MODDIR/config" "$TMP/root/boot/config-$VER") ||
    die "no kernel config found in linux-base-$VER"
cp "$KIMG" "$TMP/vmlinuz"
cp "$KCFG" "$TMP/config"
KMAP=$(pick "$MODDIR/System.map" "$TMP/root/boot/System.map-$VER") && cp "$KMAP" "$TMP/System.map"
echo "$VER" >"$TMP/version"

if ! grep -qx 'CONFIG_SCHED_CLASS_EXT=y' "$TMP/config"; then
    rm -rf "$TMP"
    die "kernel $VER from $SUITE does not have CONFIG_SCHED_CLASS_EXT=y; it cannot run sched_ext"
fi
grep -qx 'CONFIG_DEBUG_INFO_BTF=y' "$TMP/config" || warn "kernel $VER lacks CONFIG_DEBUG_INFO_BTF=y"

extract_modules "$TMP/config" "$MODDIR" "$TMP/modules"

# Keep the full module tree (compressed) for later needs; drop the rest of the packages.
mkdir -p "$TMP/lib"
mv "$MODDIR" "$TMP/lib/$VER"
rm -rf "$TMP/root" "$A/debs"/*.deb
touch "$TMP/.complete"
rm -rf "$VDIR"
mv "$TMP" "$VDIR"
ln -sfn "$VER" "$CACHE/kernel/current"
step "kernel $VER ready: $CACHE/kernel/current -> $VDIR"
