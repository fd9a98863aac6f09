package cluster

import (
	"context"
	"fmt"
	"path"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// Object is what Store writes: a built-in object with its metadata.
type Object interface {
	runtime.Object
	metav1.Object
}

// Store writes objects of one resource (such as "pods" or "deployments",
// of group version gv) straight into the cluster's etcd, where and as the
// apiserver keeps them: under its storage prefix, encoded in protobuf. The
// apiserver's watch of etcd then serves them as if created through the
// API. It is for benchmarks that load more objects than the API's write
// path takes on a small machine (100,000 pods through admission, two
// writes each, take most of an hour here): each object must already be
// complete as the apiserver would store it (defaults, uid,
// creationTimestamp, managedFields), for example a copy of one created
// through the API. An object with a resourceVersion is refused before
// anything is written; one that exists already is refused, as a create
// through the API would refuse it, and left as it was.
func (c *Cluster) Store(ctx context.Context, gv schema.GroupVersion, resource string, objs []Object) error {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   c.api.storage.Transport.ServerList,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer client.Close()
	encoder := scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), gv)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, obj := range objs {
		if obj.GetResourceVersion() != "" {
			return fmt.Errorf("%s %s/%s: a stored object has no resourceVersion (etcd's revision is its version)", resource, obj.GetNamespace(), obj.GetName())
		}
	}
	for _, obj := range objs {
		key := path.Join(c.api.storage.Prefix, resource, obj.GetNamespace(), obj.GetName())
		g.Go(func() error {
			data, err := runtime.Encode(encoder, obj)
			if err != nil {
				return fmt.Errorf("encode %s: %w", key, err)
			}
			resp, err := client.Txn(gctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, string(data))).
				Commit()
			if err != nil {
				return fmt.Errorf("store %s: %w", key, err)
			}
			if !resp.Succeeded {
				return fmt.Errorf("store %s: it exists already", key)
			}
			return nil
		})
	}
	return g.Wait()
}
