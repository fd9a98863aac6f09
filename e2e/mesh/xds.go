package mesh

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// adsServer is one istiod replica's aggregated discovery service. It serves
// only the debug type istioctl proxy-status uses; the proxies themselves are
// simulated from pod state rather than from real Envoy streams.
type adsServer struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	istiod  *SimIstiod
	replica string
	// plaintext serves 15010, where istiod authenticates debug requests
	// only with XDS_AUTH_PLAINTEXT=true.
	plaintext bool
}

func (s *adsServer) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	ctx := stream.Context()
	if s.plaintext && s.istiod.rev.Env["XDS_AUTH_PLAINTEXT"] != "true" {
		return status.Error(codes.Unauthenticated, "authentication required")
	}
	// Debug types need a verified identity on every port since 1.27.8: a
	// service-account token with the istio-ca audience.
	var header string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			header = v[0]
		}
	}
	c, err := s.istiod.auth.authenticate(ctx, header)
	if errors.Is(err, errUnauthenticated) {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	first := true
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if first {
			first = false
			if err := checkNode(req.GetNode(), c); err != nil {
				return err
			}
		}
		if req.GetTypeUrl() != TypeDebugSyncz {
			return status.Errorf(codes.InvalidArgument, "the simulated istiod serves only %s, not %s", TypeDebugSyncz, req.GetTypeUrl())
		}
		resp, err := s.syncz(c)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// checkNode refuses a requester the way istiod does: a node ID that is not
// type~ip~id~domain of a known type, or metadata whose NAMESPACE or
// SERVICE_ACCOUNT is not the token's.
func checkNode(n *corev3.Node, c caller) error {
	parts := strings.Split(n.GetId(), "~")
	if len(parts) != 4 {
		return status.Errorf(codes.InvalidArgument, "missing parts in the service node %q", n.GetId())
	}
	switch parts[0] {
	case "sidecar", "router", "waypoint", "ztunnel":
	default:
		return status.Errorf(codes.InvalidArgument, "invalid node type (valid types: [sidecar router waypoint ztunnel]) in the service node %q", n.GetId())
	}
	meta := n.GetMetadata().GetFields()
	ns, sa := meta["NAMESPACE"].GetStringValue(), meta["SERVICE_ACCOUNT"].GetStringValue()
	if (ns != "" && ns != c.Namespace) || (sa != "" && sa != c.ServiceAccount) {
		return status.Errorf(codes.PermissionDenied, "authorization failed: no identities ([spiffe://cluster.local/ns/%s/sa/%s]) matched %s/%s", c.Namespace, c.ServiceAccount, ns, sa)
	}
	return nil
}

// syncz builds the answer istiod's status generator gives: one
// ClientConfig per proxy connected to this replica.
func (s *adsServer) syncz(c caller) (*discoveryv3.DiscoveryResponse, error) {
	d := s.istiod
	now := time.Now()
	d.mu.Lock()
	d.requests[s.replica]++
	var resources []*anypb.Any
	for _, p := range d.proxiesOfLocked(s.replica, d.visibleTo(c)) {
		meta, err := structpb.NewStruct(map[string]any{
			"CLUSTER_ID": "Kubernetes", "NAMESPACE": p.namespace, "ISTIO_VERSION": d.rev.Version,
		})
		if err != nil {
			d.mu.Unlock()
			return nil, err
		}
		cc := &statusv3.ClientConfig{Node: &corev3.Node{Id: p.id(), Metadata: meta}}
		for _, t := range syncTypes {
			st := d.stateLocked(p, t, now)
			if !st.subscribed {
				continue
			}
			x := &statusv3.ClientConfig_GenericXdsConfig{TypeUrl: t, ConfigStatus: st.status(), LastUpdated: timestamppb.New(p.connectedAt)}
			if st.lastError != "" {
				x.ErrorState = &adminv3.UpdateFailureState{LastUpdateAttempt: timestamppb.New(p.connectedAt), Details: st.lastError}
			}
			cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, x)
		}
		a, err := anypb.New(cc)
		if err != nil {
			d.mu.Unlock()
			return nil, err
		}
		resources = append(resources, a)
	}
	ident := d.identifier(s.replica)
	d.mu.Unlock()
	return &discoveryv3.DiscoveryResponse{
		VersionInfo:  now.Format(time.RFC3339Nano),
		TypeUrl:      TypeDebugSyncz,
		Nonce:        strconv.FormatInt(now.UnixNano(), 36),
		Resources:    resources,
		ControlPlane: &corev3.ControlPlane{Identifier: ident},
	}, nil
}
