#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for the real-node
# tests (`make test-node`) and for trying the chart by hand:
#
#   hack/node.sh start   etcd, kube-apiserver, kube-controller-manager,
#                        kube-scheduler, containerd (runc, CNI bridge) and a
#                        kubelet whose Node goes Ready; prints the kubeconfig
#   hack/node.sh stop    stops all of it and undoes every trace on the host
#                        (processes, mounts, network devices, cgroups, state),
#                        and fails when something is left
#   hack/node.sh env     prints shell assignments (KUBECONFIG, NODE_IP, ...)
#
# Needs root. Everything it creates on the host carries a harnessfacts name:
# the state folder $HARNESSFACTS_NODE_DIR (default /var/lib/harnessfacts-node),
# a dummy (or port-less bridge) interface hf-node0 holding the node IP (the kubelet refuses a
# loopback one), the pods' bridge hf-cni0, and the cgroup /harnessfacts-node in
# each hierarchy. Every server listens on the node IP only, so nothing clashes
# with processes on 127.0.0.1, but etcd, which serves plain http without
# client authentication: it listens on 127.0.0.1:22379, out of the pods'
# reach. No kube-proxy and no iptables rule: pods reach
# the API server at the node IP (KUBERNETES_SERVICE_HOST, see test/node).
#
# The binaries come from hack/control-plane.sh and hack/node-tools.sh (built
# from the Go module proxy, cached by version); the CNI plugins from Debian's
# containernetworking-plugins.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${HARNESSFACTS_NODE_DIR:-/var/lib/harnessfacts-node}
node_name=${HARNESSFACTS_NODE_NAME:-harnessfacts-node}
node_ip=10.213.0.1
pod_cidr=10.213.64.0/24
pod_gw=10.213.64.1
service_cidr=10.213.128.0/24
service_ip=10.213.128.1
dummy=hf-node0
bridge=hf-cni0
cgroup_root=/harnessfacts-node
# The pod sandbox image: built locally (test/oci), never pulled.
pause_image=${HARNESSFACTS_PAUSE_IMAGE:-localhost/harnessfacts/pause:1}
cni_bin=/usr/lib/cni

log() { echo "node: $*" >&2; }
die() { echo "node: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (a kubelet, containerd and network devices)"

env_out() {
  cat <<EOF
export KUBECONFIG=$dir/pki/admin.kubeconfig
export HARNESSFACTS_NODE_DIR=$dir
export HARNESSFACTS_NODE_NAME=$node_name
export HARNESSFACTS_NODE_IP=$node_ip
export HARNESSFACTS_NODE_APISERVER=https://$node_ip:6443
export HARNESSFACTS_NODE_CONTAINERD=$dir/containerd/containerd.sock
export HARNESSFACTS_NODE_BIN=$dir/bin
export HARNESSFACTS_PAUSE_IMAGE=$pause_image
EOF
}

# ---------------------------------------------------------------- pki
pki() {
  local p=$dir/pki
  mkdir -p "$p"
  chmod 700 "$p"
  ( cd "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=harnessfacts-node-ca" 2>/dev/null
    cert() { # name cn org [san]
      local name=$1 cn=$2 org=$3 san=${4:-}
      openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "/CN=$cn${org:+/O=$org}" 2>/dev/null
      if [ -n "$san" ]; then printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$name.ext"
      else printf 'extendedKeyUsage=clientAuth\n' >"$name.ext"; fi
      openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$name.crt" -days 2 -extfile "$name.ext" 2>/dev/null
      rm -f "$name.csr" "$name.ext"
    }
    cert apiserver kube-apiserver "" "IP:$node_ip,IP:$service_ip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert admin admin system:masters
    cert kubelet "system:node:$node_name" system:nodes
    cert controller-manager system:kube-controller-manager ""
    cert scheduler system:kube-scheduler ""
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    for who in admin kubelet controller-manager scheduler; do
      cat >"$who.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: harnessfacts-node
  cluster: {server: "https://$node_ip:6443", certificate-authority: "$p/ca.crt"}
users:
- name: $who
  user: {client-certificate: "$p/$who.crt", client-key: "$p/$who.key"}
contexts:
- name: harnessfacts-node
  context: {cluster: harnessfacts-node, user: $who, namespace: default}
current-context: harnessfacts-node
EOF
    done
  )
}

# ---------------------------------------------------------------- start
daemon() { # name cmd...: start in its own session, output to logs/name.log
  local name=$1; shift
  setsid "$@" >"$dir/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$dir/pids/$name"
}

wait_for() { # what seconds cmd...
  local what=$1 secs=$2; shift 2
  local i
  for ((i = 0; i < secs * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "$what did not come up within ${secs}s (logs in $dir/logs)"
}

start() {
  [ ! -e "$dir/pids" ] || die "a node is already running from $dir (hack/node.sh stop first)"
  ip link show "$dummy" >/dev/null 2>&1 && die "interface $dummy exists: another node is running, or a stop was interrupted (hack/node.sh stop)"
  command -v "$cni_bin/bridge" >/dev/null || {
    log "installing Debian's containernetworking-plugins"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins >/dev/null
  }
  local cp nt
  cp=$("$here/control-plane.sh")
  nt=$("$here/node-tools.sh")
  rm -rf "$dir"
  mkdir -p "$dir"/{bin,logs,pids,etcd,cni/net.d,cni/ipam,containerd,kubelet,pod-logs}
  # 755, not 700: a user-namespaced pod's root (an unprivileged host uid)
  # must traverse to its rootfs under containerd's state. The keys are 700.
  chmod 755 "$dir"
  # Remember what existed before, so stop removes only what this node made.
  for p in /run/containerd /run/nri /run/netns /var/lib/cni /var/log/containers /var/lib/kubelet; do [ -e "$p" ] && echo "$p" >>"$dir/preexisting"; done
  touch "$dir/preexisting"
  # The CNI bridge plugin turns on IP forwarding for its gateway; stop puts
  # the host's setting back.
  sysctl -n net.ipv4.ip_forward >"$dir/ip_forward"
  cp "$cp"/{etcd,kube-apiserver,kubectl} "$nt"/* "$dir/bin/"
  export PATH="$dir/bin:$PATH"
  pki

  # A dummy interface where the kernel has the module, else a bridge with no
  # ports: either only holds the address, which is local all the same.
  ip link add "$dummy" type dummy 2>/dev/null || ip link add "$dummy" type bridge
  ip addr add "$node_ip/32" dev "$dummy"
  ip link set "$dummy" up

  # etcd on the host's loopback only: it serves plain http without client
  # authentication, and on the node's address every pod (and an agent with
  # Unrestricted egress) read every Secret from it. kube-apiserver runs on
  # the host and reaches it there.
  daemon etcd etcd --name harnessfacts-node --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:22379" --advertise-client-urls "http://127.0.0.1:22379" \
    --listen-peer-urls "http://127.0.0.1:22380" --initial-advertise-peer-urls "http://127.0.0.1:22380" \
    --initial-cluster "harnessfacts-node=http://127.0.0.1:22380" --listen-metrics-urls "" \
    --unsafe-no-fsync --log-level warn
  wait_for etcd 60 curl -fsS "http://127.0.0.1:22379/health"

  local p=$dir/pki
  daemon kube-apiserver kube-apiserver --etcd-servers "http://127.0.0.1:22379" \
    --bind-address "$node_ip" --advertise-address "$node_ip" --secure-port 6443 \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range "$service_cidr" --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction --allow-privileged=true \
    --kubelet-client-certificate "$p/admin.crt" --kubelet-client-key "$p/admin.key" \
    --kubelet-preferred-address-types InternalIP
  wait_for kube-apiserver 120 kubectl --kubeconfig "$p/admin.kubeconfig" get --raw /readyz

  daemon kube-controller-manager kube-controller-manager --kubeconfig "$p/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$p/controller-manager.kubeconfig" --authorization-kubeconfig "$p/controller-manager.kubeconfig" \
    --bind-address "$node_ip" --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --use-service-account-credentials --leader-elect=false --service-cluster-ip-range "$service_cidr" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key"
  daemon kube-scheduler kube-scheduler --kubeconfig "$p/scheduler.kubeconfig" \
    --authentication-kubeconfig "$p/scheduler.kubeconfig" --authorization-kubeconfig "$p/scheduler.kubeconfig" \
    --bind-address "$node_ip" --leader-elect=false

  # containerd: root, state, socket and runc's state in $dir; no NRI socket;
  # network namespaces under its state dir; the kubelet's oom_score_adj is
  # clamped (no CAP_SYS_RESOURCE on these machines, see shared NODE-FACTS).
  local c=$dir/containerd
  cat >"$dir/cni/net.d/10-harnessfacts.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "harnessfacts",
  "plugins": [
    {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam", "ranges": [[{"subnet": "$pod_cidr", "gateway": "$pod_gw"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
  cat >"$c/config.toml" <<EOF
version = 3
imports = []
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[debug]
  address = "$c/debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = "$c/image-verifier"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  cdi_spec_dirs = []
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$dir/bin/runc"
        Root = "$c/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$cni_bin"]
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$pause_image"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$c/certs.d"
EOF
  mkdir -p "$c/certs.d"
  daemon containerd containerd --config "$c/config.toml"
  wait_for containerd 60 ctr --address "$c/containerd.sock" version

  # The pause image: any local image that sleeps for ever (test/oci builds it).
  if [ -n "${HARNESSFACTS_PAUSE_TAR:-}" ]; then
    ctr --address "$c/containerd.sock" -n k8s.io images import --no-unpack=false "$HARNESSFACTS_PAUSE_TAR" >/dev/null
  fi

  cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
containerRuntimeEndpoint: unix://$c/containerd.sock
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $node_ip
healthzPort: 10248
podLogsDir: $dir/pod-logs
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $p/ca.crt}
authorization:
  mode: Webhook
failSwapOn: false
resolvConf: /etc/resolv.conf
# A shared machine: other engineers' builds must not make the kubelet evict.
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
  # The kubelet's cgroup root must exist in every hierarchy; stop removes it.
  local h
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -f "$h/cgroup.procs" ] && mkdir -p "$h${cgroup_root#/}"
  done
  daemon kubelet kubelet --config "$dir/kubelet/config.yaml" --kubeconfig "$p/kubelet.kubeconfig" \
    --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" --volume-plugin-dir "$dir/kubelet/volume-plugins" --node-ip "$node_ip" --hostname-override "$node_name"
  wait_for "the Node's Ready condition" 180 bash -c \
    "kubectl --kubeconfig '$p/admin.kubeconfig' get node '$node_name' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  log "node $node_name is Ready at $node_ip (kubelet $(kubelet --version | awk '{print $2}'), containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'))"
  echo "$p/admin.kubeconfig"
}

# ---------------------------------------------------------------- stop
ours_pids() { # every live process whose executable or command line is in $dir
  local f pid exe cmd
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    [ "$pid" = $$ ] && continue
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
    cmd=$( { tr '\0' ' ' <"$f"; } 2>/dev/null || true)
    if [[ $exe == "$dir/"* || $cmd == *"$dir/"* ]]; then echo "$pid"; fi
  done
}

stop_pid() { # name: TERM, then KILL after a grace
  local f=$dir/pids/$1 pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 40; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

unmount_under() { # prefix: unmount every mount below it, deepest first
  local m
  for m in $(awk -v p="$1" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r | uniq); do
    umount -l "$m" 2>/dev/null || true
  done
}

rm_cgroups() { # remove our cgroup tree in every hierarchy, leaves first
  local h d
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -d "$h${cgroup_root#/}" ] || continue
    find "$h${cgroup_root#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -d "$h${cgroup_root#/}" ] && echo "$h${cgroup_root#/}"
  done
  return 0
}

stop() {
  [ -d "$dir" ] || { ip link del "$dummy" 2>/dev/null || true; ip link del "$bridge" 2>/dev/null || true; log "no node at $dir"; return 0; }
  export PATH="$dir/bin:$PATH"
  local c=$dir/containerd p=$dir/pki
  # Let the kubelet stop the pods gracefully first (what a drain does), so
  # the node-agent's own shutdown runs; bounded, because a stuck API server
  # must not make stop hang.
  if [ -f "$dir/pids/kubelet" ] && kill -0 "$(cat "$dir/pids/kubelet")" 2>/dev/null; then
    timeout 45 kubectl --kubeconfig "$p/admin.kubeconfig" delete pods --all -A --grace-period=15 --wait=true >/dev/null 2>&1 || true
  fi
  stop_pid kubelet
  stop_pid kube-scheduler
  stop_pid kube-controller-manager
  # Containers and their shims: runc's own view, then any shim left.
  if [ -x "$dir/bin/runc" ] && [ -d "$c/runc" ]; then
    local ns id
    for ns in "$c"/runc/*/; do
      [ -d "$ns" ] || continue
      for id in $("$dir/bin/runc" --root "$ns" list -q 2>/dev/null); do
        "$dir/bin/runc" --root "$ns" delete --force "$id" >/dev/null 2>&1 || true
      done
    done
  fi
  stop_pid containerd
  stop_pid kube-apiserver
  stop_pid etcd
  local pid left
  for pid in $(ours_pids); do kill -KILL "$pid" 2>/dev/null || true; done
  sleep 0.5
  left=$(ours_pids)
  unmount_under "$dir/"
  # runc and the shims keep their sockets and state under /run/containerd
  # even with containerd's state elsewhere; NRI its socket in /run/nri; the
  # CNI library its result cache in /var/lib/cni; the kubelet its log links
  # in /var/log/containers and its device-plugin socket in /var/lib/kubelet. What existed before start keeps all but ours.
  for p in /run/containerd /run/nri /run/netns /var/lib/cni /var/log/containers /var/lib/kubelet; do
    if ! grep -qx "$p" "$dir/preexisting" 2>/dev/null; then
      unmount_under "$p/"
      rm -rf "$p"
    fi
  done
  rm -f /var/lib/cni/results/harnessfacts-* 2>/dev/null || true
  local l
  for l in /var/log/containers/*; do
    [ -L "$l" ] && [[ $(readlink "$l") == "$dir/"* ]] && rm -f "$l"
  done
  [ -f "$dir/ip_forward" ] && sysctl -qw net.ipv4.ip_forward="$(cat "$dir/ip_forward")"
  ip link del "$bridge" 2>/dev/null || true
  ip link del "$dummy" 2>/dev/null || true
  local cg
  cg=$(rm_cgroups)
  rm -rf "$dir" 2>/dev/null || { sleep 1; unmount_under "$dir/"; rm -rf "$dir"; }

  # What a clean stop promises, checked.
  local bad=()
  [ -z "$left" ] && [ -z "$(ours_pids)" ] || bad+=("processes: $(ours_pids | tr '\n' ' ')")
  grep -q -- "$dir" /proc/self/mountinfo && bad+=("mounts under $dir")
  [ -e "$dir" ] && bad+=("$dir")
  ip link show "$dummy" >/dev/null 2>&1 && bad+=("interface $dummy")
  ip link show "$bridge" >/dev/null 2>&1 && bad+=("interface $bridge")
  ip -o link show | grep -q "master $bridge" && bad+=("veths on $bridge")
  [ -n "$cg" ] && bad+=("cgroups: $cg")
  [ ${#bad[@]} -eq 0 ] || die "stop left behind: ${bad[*]}"
  log "stopped; nothing left on the host"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  env) env_out ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
