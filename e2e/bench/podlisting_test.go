package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

// podAsk is one way of asking the API server for every pod: the media
// type, the listing (one LIST, or a watch that streams the pods first,
// the watch-list), and whether the client accepts gzip.
type podAsk struct {
	name, media         string
	metadata, watchList bool
}

// accept is the Accept header: PartialObjectMetadataList for a LIST of
// metadata, PartialObjectMetadata for a watch's objects.
func (a podAsk) accept() string {
	switch {
	case !a.metadata:
		return a.media
	case a.watchList:
		return a.media + ";g=meta.k8s.io;v=v1;as=PartialObjectMetadata"
	}
	return a.media + ";g=meta.k8s.io;v=v1;as=PartialObjectMetadataList"
}

const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/vnd.kubernetes.protobuf"
)

var podAsks = []podAsk{
	{"full pods, JSON", mediaJSON, false, false},
	{"full pods, protobuf", mediaProtobuf, false, false},
	{"metadata only, JSON", mediaJSON, true, false},
	{"metadata only, protobuf", mediaProtobuf, true, false},
	{"full pods, JSON", mediaJSON, false, true},
	{"full pods, protobuf", mediaProtobuf, false, true},
	{"metadata only, JSON", mediaJSON, true, true},
	{"metadata only, protobuf", mediaProtobuf, true, true},
}

// initialEventsEnd is the annotation of the bookmark that ends a
// watch-list's first listing; its name is in the bytes of either encoding.
var initialEventsEnd = []byte("k8s.io/initial-events-end")

// measurePodListing asks the API server for every pod in each way of
// podAsks, with and without gzip, and records what a pod costs on the
// connection (TLS records, compressed when the server compressed) and
// decoded (the bytes a client parses).
func measurePodListing(b testing.TB, rc *rest.Config, pods int) {
	b.Helper()
	type cost struct{ zipped, plain, decoded int64 }
	costs := make([]cost, len(podAsks))
	var before int64
	for i, a := range podAsks {
		c := &costs[i]
		c.zipped, c.decoded = askPods(b, rc, a, true)
		c.plain, _ = askPods(b, rc, a, false)
		if a == (podAsk{"full pods, protobuf", mediaProtobuf, false, true}) {
			before = c.zipped
		}
	}
	require.Positive(b, before)
	per := func(n int64) string { return fmt.Sprintf("%.0f B", float64(n)/float64(pods)) }
	lines := []string{
		"| how | listing | on the wire, gzip (a pod) | of the agent's before | on the wire, no gzip (a pod) | decoded (a pod) |",
		"|---|---|---|---|---|---|",
	}
	for i, a := range podAsks {
		how := "one LIST"
		if a.watchList {
			how = "watch-list"
		}
		c := costs[i]
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %.2f | %s | %s |", a.name, how, per(c.zipped), float64(c.zipped)/float64(before), per(c.plain), per(c.decoded)))
	}
	lines = append(lines, "",
		"Every pod of the loaded world asked for once in each way, by a client of its own; the agent's before is full pods in protobuf by watch-list, with gzip, as client-go's generated clients and reflectors ask by default (and as the agent asks now). The bytes on its connection from the request to the last pod (the watch-list's bookmark that ends its first listing). The pods are the benchmark's injected ones, with the managedFields the API server keeps for their creation and status. Client-go asks for gzip unless told not to (rest.Config.DisableCompression), and the API server compresses LISTs and watches alike.")
	record(b, fmt.Sprintf("What listing a pod costs: %d pods", pods), lines...)
}

// askPods lists every pod as a says, and returns the bytes its connection
// received and the bytes decoded.
func askPods(b testing.TB, rc *rest.Config, a podAsk, gzip bool) (wire, decoded int64) {
	b.Helper()
	var received atomic.Int64
	cfg := rest.CopyConfig(rc)
	cfg.DisableCompression = !gzip
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countedConn{c, &received}, nil
	}
	transport, err := rest.TransportFor(cfg)
	require.NoError(b, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	url := cfg.Host + "/api/v1/pods"
	if a.watchList {
		url += "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(b, err)
	req.Header.Set("Accept", a.accept())
	resp, err := (&http.Client{Transport: transport}).Do(req)
	require.NoError(b, err)
	defer resp.Body.Close()
	require.Equal(b, http.StatusOK, resp.StatusCode, "%s", a.name)
	buf := make([]byte, 64<<10)
	var tail []byte
	for {
		n, err := resp.Body.Read(buf)
		decoded += int64(n)
		if a.watchList && n > 0 {
			// The marker may straddle two reads.
			tail = append(tail[max(0, len(tail)-len(initialEventsEnd)):], buf[:n]...)
			if bytes.Contains(tail, initialEventsEnd) {
				return received.Load(), decoded
			}
		}
		if err == io.EOF {
			require.False(b, a.watchList, "the watch-list ended before its bookmark")
			return received.Load(), decoded
		}
		require.NoError(b, err)
	}
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}
