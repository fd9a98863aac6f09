package cluster

import (
	"fmt"
	"path"
	"strconv"
	"time"

	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/rest"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// apiServer is a kube-apiserver serving on a free loopback port.
type apiServer struct {
	config   *rest.Config
	teardown func()
}

// startAPIServer starts kube-apiserver against etcdURL.
//
// RBAC is on, so that identities other than the loopback administrator get
// real Forbidden answers. The ServiceAccount admission plugin is off: it
// rejects pods until a namespace's default ServiceAccount exists, which turns
// every new namespace into a race with the serviceaccount controller.
func startAPIServer(tb *harnessTB, etcdURL string) (*apiServer, error) {
	storage := storagebackend.NewDefaultConfig(path.Join("/meshwave-e2e", strconv.FormatInt(time.Now().UnixNano(), 36), "registry"), nil)
	storage.Transport.ServerList = []string{etcdURL}

	flags := []string{
		"--endpoint-reconciler-type=none",
		"--disable-admission-plugins=ServiceAccount",
		"--authorization-mode=RBAC",
		"--max-requests-inflight=2000",
		"--max-mutating-requests-inflight=1000",
	}
	opts := apiservertesting.NewDefaultTestServerOptions()
	// The invariant check scrapes the apiserver's own metrics at teardown and
	// fails on labels it does not expect; it tests Kubernetes, not us.
	opts.DisableInvariantChecks = true
	server, err := apiservertesting.StartTestServer(tb, opts, flags, storage)
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	cfg := rest.CopyConfig(server.ClientConfig)
	return &apiServer{config: cfg, teardown: server.TearDownFn}, nil
}
