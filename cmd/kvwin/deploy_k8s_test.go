package main

import (
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// k8sObject is one manifest document.
type k8sObject struct {
	file, kind, name string
	raw              map[string]any
}

// k8sObjects decodes every manifest under kubernetes/.
func k8sObjects(t *testing.T, files map[string][]byte) []k8sObject {
	var out []k8sObject
	for name, data := range files {
		if !strings.HasPrefix(name, "kubernetes/") || path.Base(name) == "kustomization.yaml" {
			continue
		}
		for _, doc := range yamlDocs(t, name, data) {
			kind, meta := asString(doc["kind"]), asMap(doc["metadata"])
			if kind == "" || asString(doc["apiVersion"]) == "" || asString(meta["name"]) == "" {
				t.Fatalf("%s: a document without apiVersion, kind or metadata.name", name)
			}
			out = append(out, k8sObject{file: name, kind: kind, name: asString(meta["name"]), raw: doc})
		}
	}
	return out
}

func find(objs []k8sObject, kind, name string) *k8sObject {
	for i := range objs {
		if objs[i].kind == kind && objs[i].name == name {
			return &objs[i]
		}
	}
	return nil
}

// path walks nested maps.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		v = asMap(v)[k]
	}
	return v
}

// containerPorts returns a workload's container ports, by name and number.
func containerPorts(w k8sObject) map[string]int {
	ports := map[string]int{}
	for _, c := range asList(dig(w.raw, "spec", "template", "spec", "containers")) {
		for _, p := range asList(asMap(c)["ports"]) {
			n, _ := strconv.Atoi(asString(asMap(p)["containerPort"]))
			ports[asString(asMap(p)["name"])] = n
			ports[strconv.Itoa(n)] = n
		}
	}
	return ports
}

// selects reports whether a Service's selector matches a workload's pods.
func selects(svc, w k8sObject) bool {
	sel := asMap(dig(svc.raw, "spec", "selector"))
	labels := asMap(dig(w.raw, "spec", "template", "metadata", "labels"))
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// checkKubernetes checks the documents of one file against all of
// kubernetes/: workloads (flags, probes on /health, ports, the config file
// and keys they mount, GPUs), Services (ports of the pods they select),
// the Ingress (a Service port, hashing on X-Conversation-Id), the
// ConfigMap's config (backends that are pods of a StatefulSet).
func checkKubernetes(t *testing.T, files map[string][]byte, p string) {
	objs := k8sObjects(t, files)
	if path.Base(p) == "kustomization.yaml" {
		for _, r := range strs(yamlDocs(t, p, files[p])[0]["resources"]) {
			if files["kubernetes/"+r] == nil {
				t.Errorf("%s: resource %s is not a file", p, r)
			}
		}
		return
	}
	for _, o := range objs {
		if o.file != p {
			continue
		}
		switch o.kind {
		case "Deployment", "StatefulSet":
			checkWorkload(t, objs, files, o)
		case "Service":
			ws := 0
			for _, w := range objs {
				if (w.kind == "Deployment" || w.kind == "StatefulSet") && selects(o, w) {
					ws++
					for _, sp := range asList(dig(o.raw, "spec", "ports")) {
						if tp := asString(asMap(sp)["targetPort"]); containerPorts(w)[tp] == 0 {
							t.Errorf("%s: Service %s targets port %q, not a port of %s", p, o.name, tp, w.name)
						}
					}
				}
			}
			if ws == 0 {
				t.Errorf("%s: Service %s selects no workload", p, o.name)
			}
		case "Ingress":
			if h := asString(dig(o.raw, "metadata", "annotations", "nginx.ingress.kubernetes.io/upstream-hash-by")); h != "$http_x_conversation_id" {
				t.Errorf("%s: upstream-hash-by %q: want $http_x_conversation_id", p, h)
			}
			for _, r := range asList(dig(o.raw, "spec", "rules")) {
				for _, hp := range asList(dig(r, "http", "paths")) {
					svc := dig(hp, "backend", "service")
					s := find(objs, "Service", asString(dig(svc, "name")))
					if s == nil {
						t.Fatalf("%s: Ingress backend %v is not a Service", p, svc)
					}
					want := asString(dig(svc, "port", "name")) + asString(dig(svc, "port", "number"))
					if !slices.ContainsFunc(asList(dig(s.raw, "spec", "ports")), func(sp any) bool {
						return asString(asMap(sp)["name"]) == want || asString(asMap(sp)["port"]) == want
					}) {
						t.Errorf("%s: Ingress uses port %q of Service %s, which has no such port", p, want, s.name)
					}
				}
			}
		case "ConfigMap":
			for key, v := range asMap(o.raw["data"]) {
				cfg := checkConfig(t, p+" "+key, []byte(asString(v)))
				for _, u := range backendURLs(t, p+" "+key, cfg) {
					if strings.HasPrefix(u.Scheme, "dns") {
						checkHeadless(t, objs, p, u.Hostname(), u.Port())
						continue
					}
					checkPodURL(t, objs, p, u.Hostname(), u.Port())
				}
			}
		case "PodDisruptionBudget":
			checkPDB(t, objs, o)
		case "Secret", "Namespace":
		default:
			t.Errorf("%s: no check knows kind %s", p, o.kind)
		}
	}
}

// checkHeadless: a dns:// backend names a headless Service (clusterIP:
// None, whose DNS answer is its pods' addresses, not one virtual IP) of
// that port, selecting a workload.
func checkHeadless(t *testing.T, objs []k8sObject, p, host, port string) {
	s := find(objs, "Service", host)
	if s == nil || asString(dig(s.raw, "spec", "clusterIP")) != "None" {
		t.Errorf("%s: dns backend %s is not a headless Service (clusterIP: None): its DNS answer would be one address", p, host)
		return
	}
	checkPodURL(t, objs, p, host, port)
}

// checkPDB: a PodDisruptionBudget selects a workload and lets at least
// one of its pods go while keeping at least one.
func checkPDB(t *testing.T, objs []k8sObject, o k8sObject) {
	sel := asMap(dig(o.raw, "spec", "selector", "matchLabels"))
	var w *k8sObject
	for i := range objs {
		labels := asMap(dig(objs[i].raw, "spec", "template", "metadata", "labels"))
		if (objs[i].kind == "Deployment" || objs[i].kind == "StatefulSet") && len(sel) > 0 && !slices.ContainsFunc(mapKeysList(sel), func(k string) bool { return labels[k] != sel[k] }) {
			w = &objs[i]
		}
	}
	if w == nil {
		t.Fatalf("%s: PodDisruptionBudget %s selects no workload", o.file, o.name)
	}
	replicas, _ := strconv.Atoi(asString(dig(w.raw, "spec", "replicas")))
	minAvail, hasMin := dig(o.raw, "spec", "minAvailable"), dig(o.raw, "spec", "minAvailable") != nil
	maxUnavail, _ := strconv.Atoi(asString(dig(o.raw, "spec", "maxUnavailable")))
	if hasMin {
		n, _ := strconv.Atoi(asString(minAvail))
		if n < 1 || n >= replicas {
			t.Errorf("%s: PodDisruptionBudget %s: minAvailable %d of %d replicas of %s: want 1..%d", o.file, o.name, n, replicas, w.name, replicas-1)
		}
	} else if maxUnavail < 1 || maxUnavail >= replicas {
		t.Errorf("%s: PodDisruptionBudget %s: maxUnavailable %d of %d replicas of %s", o.file, o.name, maxUnavail, replicas, w.name)
	}
}

func mapKeysList(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkPodURL: host is POD.SERVICE of a StatefulSet (ordinal below its
// replicas) or a Service, and port is one of that Service's ports.
func checkPodURL(t *testing.T, objs []k8sObject, p, host, port string) {
	svcName := host
	if pod, svc, ok := strings.Cut(host, "."); ok {
		svcName = strings.Split(svc, ".")[0]
		i := strings.LastIndex(pod, "-")
		ord, err := strconv.Atoi(pod[i+1:])
		ss := find(objs, "StatefulSet", pod[:max(i, 0)])
		if i < 0 || err != nil || ss == nil || asString(dig(ss.raw, "spec", "serviceName")) != svcName {
			t.Errorf("%s: backend host %s is not a pod of a StatefulSet with service %s", p, host, svcName)
			return
		}
		if n, _ := strconv.Atoi(asString(dig(ss.raw, "spec", "replicas"))); ord >= n {
			t.Errorf("%s: backend %s: StatefulSet %s has %d replicas", p, host, ss.name, n)
		}
	}
	s := find(objs, "Service", svcName)
	if s == nil || !slices.ContainsFunc(asList(dig(s.raw, "spec", "ports")), func(sp any) bool { return asString(asMap(sp)["port"]) == port }) {
		t.Errorf("%s: backend %s:%s is not a port of a Service %s", p, host, port, svcName)
	}
}

// checkWorkload checks each container of a Deployment or StatefulSet.
func checkWorkload(t *testing.T, objs []k8sObject, files map[string][]byte, w k8sObject) {
	p := w.file
	ports := containerPorts(w)
	spec := asMap(dig(w.raw, "spec", "template", "spec"))
	volumes := map[string]map[string]any{}
	for _, v := range asList(spec["volumes"]) {
		volumes[asString(asMap(v)["name"])] = asMap(v)
	}
	for _, v := range asList(dig(w.raw, "spec", "volumeClaimTemplates")) {
		volumes[asString(dig(v, "metadata", "name"))] = map[string]any{"persistentVolumeClaim": v}
	}
	for _, c := range asList(spec["containers"]) {
		c := asMap(c)
		name, image := asString(c["name"]), asString(c["image"])
		for _, m := range asList(c["volumeMounts"]) {
			if volumes[asString(asMap(m)["name"])] == nil {
				t.Errorf("%s: %s mounts volume %q, which the pod does not declare", p, name, asString(asMap(m)["name"]))
			}
		}
		probe := asMap(dig(c, "readinessProbe", "httpGet"))
		if strings.HasPrefix(image, "postgres:") {
			if cmd := strs(dig(c, "readinessProbe", "exec", "command")); len(cmd) == 0 || cmd[0] != "pg_isready" {
				t.Errorf("%s: %s: readiness probe %v: want pg_isready", p, name, cmd)
			}
		} else if asString(probe["path"]) != "/health" || ports[asString(probe["port"])] == 0 {
			t.Errorf("%s: %s: readiness probe %v: want /health on a container port %v", p, name, probe, ports)
		}
		for _, pr := range []string{"livenessProbe", "startupProbe"} {
			if hg := asMap(dig(c, pr, "httpGet")); hg != nil && ports[asString(hg["port"])] == 0 {
				t.Errorf("%s: %s: %s port %v is not a container port", p, name, pr, hg["port"])
			}
		}
		switch {
		case strings.Contains(image, "llama.cpp:server"):
			args := strs(c["args"])
			if lp := argAfter(args, "--port"); ports[lp] == 0 {
				t.Errorf("%s: llama-server listens on %q, not a container port %v", p, lp, ports)
			}
			gpus := asString(dig(c, "resources", "limits", "nvidia.com/gpu"))
			if n, _ := strconv.Atoi(gpus); n < 1 || !strings.HasSuffix(image, "-cuda") {
				t.Errorf("%s: llama-server: nvidia.com/gpu %q with image %s: want a GPU and a CUDA image", p, gpus, image)
			}
		case strings.Contains(image, "kvwin"):
			checkGatewayContainer(t, objs, p, c, volumes, ports)
		case strings.HasPrefix(image, "postgres:"):
			if v, _ := mounted(c, volumes, "/var/lib/postgresql/data/x"); dig(v, "persistentVolumeClaim") == nil {
				t.Errorf("%s: postgres keeps its data on no PersistentVolume", p)
			}
		default:
			t.Errorf("%s: container %s: image %s is neither kvwin, llama-server nor postgres", p, name, image)
		}
	}
}

// mounted returns the volume and the file inside it that a container sees
// at file, or nil.
func mounted(c map[string]any, volumes map[string]map[string]any, file string) (map[string]any, string) {
	for _, m := range asList(c["volumeMounts"]) {
		mp, sub := asString(asMap(m)["mountPath"]), asString(asMap(m)["subPath"])
		v := volumes[asString(asMap(m)["name"])]
		switch {
		case sub != "" && mp == file:
			return v, sub
		case sub == "" && strings.HasPrefix(file, mp+"/"):
			return v, strings.TrimPrefix(file, mp+"/")
		}
	}
	return nil, ""
}

// checkGatewayContainer: the args are kvwin serve flags; --config is a
// mounted ConfigMap key whose addr is the container port; api_key_file is
// a mounted Secret key; secret env vars name keys that exist.
func checkGatewayContainer(t *testing.T, objs []k8sObject, p string, c map[string]any, volumes map[string]map[string]any, ports map[string]int) {
	flags := serveArgs(t, p+" kvwin args", strs(c["args"]))
	vol, key := mounted(c, volumes, flags["config"])
	cm := find(objs, "ConfigMap", asString(dig(vol, "configMap", "name")))
	if cm == nil || asString(dig(cm.raw, "data", key)) == "" {
		t.Fatalf("%s: --config %s is not a mounted ConfigMap key", p, flags["config"])
	}
	cfg := checkConfig(t, cm.file+" "+key, []byte(asString(dig(cm.raw, "data", key))))
	if lp := port(t, cm.file, *cfg.Addr); ports[strconv.Itoa(lp)] == 0 {
		t.Errorf("%s: kvwin listens on %d (addr), not a container port %v", p, lp, ports)
	}
	if cfg.DataDir != nil {
		if v, _ := mounted(c, volumes, *cfg.DataDir+"/x"); v == nil {
			t.Errorf("%s: data_dir %s is not a mounted volume (the root file system is read-only)", p, *cfg.DataDir)
		}
	}
	secretKey := func(name, key string) bool {
		s := find(objs, "Secret", name)
		return s != nil && asString(dig(s.raw, "stringData", key))+asString(dig(s.raw, "data", key)) != ""
	}
	if cfg.APIKeyFile != nil {
		vol, file := mounted(c, volumes, *cfg.APIKeyFile)
		sec := asString(dig(vol, "secret", "secretName"))
		item := file
		for _, it := range asList(dig(vol, "secret", "items")) {
			if asString(asMap(it)["path"]) == file {
				item = asString(asMap(it)["key"])
			}
		}
		if !secretKey(sec, item) {
			t.Errorf("%s: api_key_file %s is not a mounted Secret key", p, *cfg.APIKeyFile)
		}
	}
	for _, e := range asList(c["env"]) {
		ref := asMap(dig(e, "valueFrom", "secretKeyRef"))
		if ref != nil && !secretKey(asString(ref["name"]), asString(ref["key"])) {
			t.Errorf("%s: env %s: Secret %s has no key %s", p, asString(asMap(e)["name"]), ref["name"], ref["key"])
		}
		if asString(asMap(e)["name"]) == "KVWIN_MEMORY_STORE" {
			checkMemoryStore(t, objs, p, ref)
		}
	}
}

// checkMemoryStore: the gateway's KVWIN_MEMORY_STORE comes from a Secret
// (a password stays out of the manifests' plain text and the process
// list) and is a postgres:// DSN of a Service and port; when that Service
// is the example PostgreSQL, its user, database and password agree.
func checkMemoryStore(t *testing.T, objs []k8sObject, p string, ref map[string]any) {
	if ref == nil {
		t.Fatalf("%s: KVWIN_MEMORY_STORE is not from a Secret", p)
	}
	sec := find(objs, "Secret", asString(ref["name"]))
	u, err := url.Parse(asString(dig(sec.raw, "stringData", asString(ref["key"]))))
	if err != nil || u.Scheme != "postgres" {
		t.Fatalf("%s: KVWIN_MEMORY_STORE %v: want a postgres:// DSN (%v)", p, u, err)
	}
	checkPodURL(t, objs, p, u.Hostname(), u.Port())
	svc := find(objs, "Service", u.Hostname())
	for _, w := range objs {
		if w.kind != "StatefulSet" || svc == nil || !selects(*svc, w) {
			continue
		}
		env := map[string]string{}
		for _, c := range asList(dig(w.raw, "spec", "template", "spec", "containers")) {
			for _, e := range asList(asMap(c)["env"]) {
				v := asString(asMap(e)["value"])
				if r := asMap(dig(e, "valueFrom", "secretKeyRef")); r != nil {
					v = asString(dig(find(objs, "Secret", asString(r["name"])).raw, "stringData", asString(r["key"])))
				}
				env[asString(asMap(e)["name"])] = v
			}
		}
		pw, _ := u.User.Password()
		if env["POSTGRES_USER"] != u.User.Username() || env["POSTGRES_PASSWORD"] != pw || env["POSTGRES_DB"] != strings.TrimPrefix(u.Path, "/") {
			t.Errorf("%s: KVWIN_MEMORY_STORE's user, password or database do not match %s's POSTGRES_* env", p, w.name)
		}
	}
}
