package cluster

import (
	"fmt"
	"net"
)

// freePort asks the kernel for an unused TCP port on host. The port is
// released before it is returned, so a caller that cannot take a listener
// directly races other processes for it; the window is a few microseconds.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
