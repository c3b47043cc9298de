#!/usr/bin/env bash
# Manual live trials of the scheduling loop against a REAL kube-apiserver (not run by ctest; the e2e suite in
# tests/e2e drives the full lab). A private etcd (127.0.0.1:13379/13380) and kube-apiserver (127.0.0.1:17443),
# 200 simulated A100x4 nodes created as Node objects (no kwok: pods stay Pending once bound), the mock device
# agent, and `gpuslice serve --enable-webhook=false` (pods carry schedulerName themselves).
#
#   tests/scheduler/loop_live.sh up          start etcd + apiserver, create 200 nodes and the bench namespace
#   tests/scheduler/loop_live.sh bench [serve flags]   2000 pods created, then serve started; time to bind all
#   tests/scheduler/loop_live.sh crash       kill -9 serve 3x mid-burst (400 pods), restart, check the API
#   tests/scheduler/loop_live.sh failover    2 replicas, kill -9 the leader mid-burst (1200 pods), check the API
#   tests/scheduler/loop_live.sh down
# Needs the lab tools (lab/build-tools.sh --print-bin) and build/loop/cmd/gpuslice (or G=path).
set -u
L=${LOOPLAB:-/tmp/looplab}

# check_api: from final.json / final-nodes.json (the API's pods and nodes): every pod bound, vgpu-node equal to
# its node, no card over-booked (81920 MiB, 100 cores), no node lock left.
check_api() {
python3 - <<'PY'
import json, collections
pods=json.load(open('final.json'))['items']
use=collections.defaultdict(lambda:[0,0]); bad=[]
for p in pods:
    a=p['metadata'].get('annotations',{}); node=p['spec'].get('nodeName')
    if not node: bad.append(p['metadata']['name']+' unbound'); continue
    if a.get('hami.io/vgpu-node')!=node: bad.append(p['metadata']['name']+' vgpu-node %s != %s'%(a.get('hami.io/vgpu-node'),node))
    for slot in a.get('hami.io/vgpu-devices-allocated','').split(';'):
        for d in slot.split(':'):
            if ',' in d:
                u,_,m,c=d.split(','); use[u][0]+=int(m); use[u][1]+=int(c)
over=[(u,m,c) for u,(m,c) in use.items() if m>81920 or c>100]
locks=[n['metadata']['name'] for n in json.load(open('final-nodes.json'))['items'] if 'hami.io/mutex.lock' in n['metadata'].get('annotations',{})]
print('pods',len(pods),'cards used',len(use),'over-booked cards',over,'problems',bad[:5],'locks left',locks)
PY
}

export G=${G:-$(cd "$(dirname "$0")/../.." && pwd)/build/loop/cmd/gpuslice}
TOOLS=$("$(cd "$(dirname "$0")/../.." && pwd)/lab/build-tools.sh" --print-bin)
mkdir -p "$L" && cd "$L"
cmd=${1:-}; shift || true
case $cmd in
up)
P=$L/pki; B=$TOOLS
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy
mkdir -p $P && cd $P
if [[ ! -f admin.crt ]]; then
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=lab-ca -keyout ca.key -out ca.crt 2>/dev/null
sign() { openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout $1.key -out $1.csr 2>/dev/null; printf '%b\n' "$3" >$1.ext
  openssl x509 -req -in $1.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile $1.ext -out $1.crt 2>/dev/null; }
S='keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth'; C=${S/serverAuth/clientAuth}
sign apiserver /CN=kube-apiserver "$S\nsubjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1"
sign admin "/O=system:masters/CN=lab-admin" "$C"
openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
fi
cat > $L/admin.kubeconfig <<EOC
apiVersion: v1
kind: Config
clusters: [{name: lab, cluster: {server: "https://127.0.0.1:17443", certificate-authority: $P/ca.crt}}]
users: [{name: admin, user: {client-certificate: $P/admin.crt, client-key: $P/admin.key}}]
contexts: [{name: lab, context: {cluster: lab, user: admin}}]
current-context: lab
EOC
rm -rf /dev/shm/looplab-etcd
$B/etcd --name lab --data-dir /dev/shm/looplab-etcd --logger=zap --log-outputs=stderr --unsafe-no-fsync \
  --listen-client-urls http://127.0.0.1:13379 --advertise-client-urls http://127.0.0.1:13379 \
  --listen-peer-urls http://127.0.0.1:13380 --initial-advertise-peer-urls http://127.0.0.1:13380 \
  --initial-cluster lab=http://127.0.0.1:13380 >$L/etcd.log 2>&1 &
echo $! > $L/etcd.pid
$B/kube-apiserver --etcd-servers=http://127.0.0.1:13379 \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=17443 --cert-dir=$L/apiserver \
  --tls-cert-file=$P/apiserver.crt --tls-private-key-file=$P/apiserver.key --client-ca-file=$P/ca.crt \
  --service-account-issuer=https://127.0.0.1:17443 --service-account-key-file=$P/sa.pub \
  --service-account-signing-key-file=$P/sa.key --service-cluster-ip-range=10.0.0.0/24 \
  --authorization-mode=RBAC --allow-privileged=true --profiling=false \
  --disable-admission-plugins=ServiceAccount,TaintNodesByCondition >$L/apiserver.log 2>&1 &
echo $! > $L/apiserver.pid
for i in $(seq 60); do curl -sf --cacert $P/ca.crt https://127.0.0.1:17443/readyz >/dev/null && break; sleep 1; done
curl -sf --cacert $P/ca.crt https://127.0.0.1:17443/readyz >/dev/null || { echo "apiserver not ready"; exit 1; }
  export KUBECONFIG=$L/admin.kubeconfig K=$TOOLS/kubectl
  python3 - "$L" <<'PY'
import json, sys
L = sys.argv[1]
items = []
for i in range(200):
    cards = ",".join('{"id":"GPU-n%03d-%d","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100-SXM4-80GB","mode":"hami-core","health":true}' % (i, c) for c in range(4))
    items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sim-%03d" % i, "labels": {"type": "kwok"}, "annotations": {"hami.io/node-nvidia-register": "[" + cards + "]"}},
                  "spec": {}, "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "40"}, "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "40"}}})
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(L + "/nodes200.json", "w"))
pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-%04d" % i, "namespace": "bench"}, "spec": {"schedulerName": "gpuslice-scheduler", "containers": [{"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "10"}}}]}} for i in range(2000)]
json.dump({"apiVersion": "v1", "kind": "List", "items": pods}, open(L + "/pods2000.json", "w"))
PY
  $K create ns kube-system >/dev/null 2>&1; $K create ns bench; $K create -f $L/nodes200.json >/dev/null; $K get nodes | wc -l
  ;;
down)
  for f in serve serve1 serve2 agent apiserver etcd; do [[ -f $L/$f.pid ]] && kill $(cat $L/$f.pid) 2>/dev/null; rm -f $L/$f.pid; done
  sleep 1; rm -rf /dev/shm/looplab-etcd
  ;;
bench)
export KUBECONFIG=$L/admin.kubeconfig K=$TOOLS/kubectl G=${G:-/work/main/build/loop/cmd/gpuslice}
kill $(cat serve.pid 2>/dev/null) $(cat agent.pid 2>/dev/null) 2>/dev/null; sleep 0.5
$K delete pods -n bench --all --grace-period=0 --force >/dev/null 2>&1
for n in $($K get nodes -o name); do :; done
$K get nodes -o name | xargs -P4 -I{} $K annotate {} hami.io/mutex.lock- >/dev/null 2>&1
($G mock-device-agent --kubeconfig $KUBECONFIG --kube-qps 1000 --kube-burst 2000 > agent.log 2>&1 & echo $! > agent.pid)
$K create -f pods2000.json >/dev/null
start=$(date +%s.%N)
($G serve --enable-webhook=false --health-bind-address 127.0.0.1:18080 --kubeconfig $KUBECONFIG --leader-elect=false "$@" > serve.log 2>&1 & echo $! > serve.pid)
while true; do
  n=$(curl -s 127.0.0.1:18080/metrics | awk -F" " '/attempts_total\{result="scheduled"\}/{print int($2)}'); n=${n:-0}
  [[ $n -ge 2000 ]] && break
  sleep 0.25
  (( $(echo "$(date +%s.%N) - $start > 300" | bc) )) && { echo "timeout at $n"; break; }
done
end=$(date +%s.%N)
echo "bound $n in $(echo "$end - $start" | bc) s"
curl -s 127.0.0.1:18080/metrics | grep -E "attempts_total\{|e2e_scheduling_duration_seconds_(sum|count)|lock_operations_total\{"
  ;;
crash)
export KUBECONFIG=$L/admin.kubeconfig K=$TOOLS/kubectl G=${G:-/work/main/build/loop/cmd/gpuslice}
N=${N:-400}
kill $(cat serve.pid 2>/dev/null) $(cat agent.pid 2>/dev/null) 2>/dev/null; sleep 0.5
$K delete pods -n bench --all --grace-period=0 --force >/dev/null 2>&1
$K get nodes -o name | xargs -P4 -I{} $K annotate {} hami.io/mutex.lock- >/dev/null 2>&1
python3 -c "
import json
d=json.load(open('pods2000.json')); d['items']=d['items'][:$N]
for p in d['items']:
    p['spec']['containers'][0]['resources']['limits']={'nvidia.com/gpu':'1','nvidia.com/gpumem':'30000','nvidia.com/gpucores':'40'}
json.dump(d,open('podsN.json','w'))"
($G mock-device-agent --kubeconfig $KUBECONFIG --kube-qps 1000 --kube-burst 2000 > agent.log 2>&1 & echo $! > agent.pid)
$K create -f podsN.json >/dev/null
run() { ($G serve --enable-webhook=false --health-bind-address 127.0.0.1:18080 --kubeconfig $KUBECONFIG --leader-elect=false \
  --kube-qps 1000 --kube-burst 2000 "$@" >> serve.log 2>&1 & echo $! > serve.pid); }
: > serve.log
for k in 1 2 3; do
  run; sleep $((2 + k)); kill -9 $(cat serve.pid); echo "killed -9 after $((2 + k)) s: $($K get pods -n bench --field-selector spec.nodeName!= -o name | wc -l) bound"
done
run
for i in $(seq 600); do
  n=$($K get pods -n bench --field-selector spec.nodeName!= -o name | wc -l); [[ $n -ge $N ]] && break; sleep 1
done
echo "after restart: $n/$N bound"
$K get pods -n bench -o json > final.json
$K get nodes -o json > final-nodes.json
check_api
  ;;
failover)
export KUBECONFIG=$L/admin.kubeconfig K=$TOOLS/kubectl G=${G:-/work/main/build/loop/cmd/gpuslice}
kill $(cat serve.pid 2>/dev/null) $(cat serve2.pid 2>/dev/null) $(cat agent.pid 2>/dev/null) 2>/dev/null; sleep 0.5
$K delete pods -n bench --all --grace-period=0 --force >/dev/null 2>&1
$K get nodes -o name | xargs -P4 -I{} $K annotate {} hami.io/mutex.lock- >/dev/null 2>&1
($G mock-device-agent --kubeconfig $KUBECONFIG --kube-qps 1000 --kube-burst 2000 > agent.log 2>&1 & echo $! > agent.pid)
for r in 1 2; do
  ($G serve --enable-webhook=false --health-bind-address 127.0.0.1:1808$r --kubeconfig $KUBECONFIG \
     --leader-elect-identity replica-$r --kube-qps 1000 --kube-burst 2000 > serve$r.log 2>&1 & echo $! > serve$r.pid)
done
for i in $(seq 40); do
  a=$(curl -s -o /dev/null -w '%{http_code}' 127.0.0.1:18081/readyz/leader); b=$(curl -s -o /dev/null -w '%{http_code}' 127.0.0.1:18082/readyz/leader)
  [[ $a == 200 && $b == 500 ]] && { leader=1; break; }; [[ $a == 500 && $b == 200 ]] && { leader=2; break; }; sleep 1
done
other=$((3 - leader))
echo "leader: replica-$leader; readyz of the other: $(curl -s 127.0.0.1:1808$other/readyz/leader)"
$K create -f podsN.json >/dev/null & cpid=$!
sleep 2
echo "killing replica-$leader (-9) with $($K get pods -n bench --field-selector spec.nodeName!= -o name | wc -l) bound"
t0=$(date +%s); kill -9 $(cat serve$leader.pid)
for i in $(seq 120); do [[ $(curl -s 127.0.0.1:1808$other/readyz) == ok ]] && break; sleep 0.5; done
echo "replica-$other ready (leader) after $(( $(date +%s) - t0 )) s; holder: $($K get lease -n gpuslice-system gpuslice-scheduler -o jsonpath='{.spec.holderIdentity} transitions={.spec.leaseTransitions}')"
wait $cpid; N=$(python3 -c "import json;print(len(json.load(open('podsN.json'))['items']))")
for i in $(seq 300); do n=$($K get pods -n bench --field-selector spec.nodeName!= -o name | wc -l); [[ $n -ge $N ]] && break; sleep 1; done
echo "bound $n/$N, $(( $(date +%s) - t0 )) s after the kill"
$K get pods -n bench -o json > final.json; $K get nodes -o json > final-nodes.json
check_api
kill $(cat serve$other.pid)
  ;;
*) sed -n 2,15p "$0"; exit 2 ;;
esac
