package cluster

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEtcdTakesOtherPortsWhenOneIsTakenBeforeItListens(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	picks := 0
	etcdPort = func(host string) (int, error) {
		picks++
		if picks == 1 {
			return port, nil // free when picked, taken by another process since
		}
		return freePort(host)
	}
	defer func() { etcdPort = freePort }()

	s, err := startEtcd(t.TempDir())
	require.NoError(t, err)
	defer s.stop()
	assert.Equal(t, 4, picks, "two ports for the attempt that could not listen, two for the one that did")
	assert.NotEqual(t, "http://127.0.0.1:"+strconv.Itoa(port), s.clientURL)
}
