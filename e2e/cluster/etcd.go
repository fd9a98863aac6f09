package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// etcdServer is an embedded etcd member listening on loopback.
type etcdServer struct {
	etcd      *embed.Etcd
	clientURL string
}

// etcdBindAttempts is how many pairs of ports startEtcd tries. etcd takes
// its ports by number (freePort), so another process can take one first:
// an outgoing connection's ephemeral port, on a machine that runs many
// worlds side by side.
const etcdBindAttempts = 5

// etcdPort picks each port etcd listens on; tests replace it.
var etcdPort = freePort

// startEtcd starts a single-member etcd in dir, on other ports when a port
// it was given was taken before it could listen.
func startEtcd(dir string) (*etcdServer, error) {
	var err error
	for range etcdBindAttempts {
		var s *etcdServer
		if s, err = startEtcdOnce(dir); !errors.Is(err, syscall.EADDRINUSE) {
			return s, err
		}
	}
	return nil, err
}

// startEtcdOnce starts a single-member etcd in dir. fsync is off: the data
// lives only as long as the test, and fsync on a busy CI disk costs
// seconds.
func startEtcdOnce(dir string) (*etcdServer, error) {
	clientPort, err := etcdPort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	peerPort, err := etcdPort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}

	cfg := embed.NewConfig()
	cfg.Name = "meshwave-e2e"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	// The benchmark's 100,000 pods and their history take etcd's
	// database to 1.4 GB, near its default quota of 2 GiB.
	cfg.QuotaBackendBytes = 8 << 30
	// etcd logs its own orderly shutdown at error level; only a fatal
	// problem is worth a line in a test's output.
	cfg.LogLevel = "fatal"
	if os.Getenv("MESHWAVE_E2E_KLOG") != "" {
		cfg.LogLevel = "info"
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd was not ready after 30s")
	}
	return &etcdServer{etcd: e, clientURL: clientURL.String()}, nil
}

func (s *etcdServer) stop() { s.etcd.Close() }
