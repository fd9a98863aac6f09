package agent

import (
	"context"
	"fmt"
	"os"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RemoteSecretOptions are create-remote-secret's: the cluster the secret
// reads (the one the command runs against), and where its account lives.
type RemoteSecretOptions struct {
	// Cluster is the cluster's name in the fleet's rings.
	Cluster string
	// AccountNamespace holds the reading account in this cluster; the
	// Secret goes into SecretNamespace of the other clusters, where their
	// agents run.
	AccountNamespace, SecretNamespace string
	// Server is the address the other clusters reach this one's apiserver
	// at; "" is the kubeconfig's own.
	Server string
	// TokenExpiration is the life of the account's token.
	TokenExpiration time.Duration
}

// remoteReader is the name of the account, its ClusterRole and binding.
const remoteReader = "meshwave-remote-reader"

// CreateRemoteSecret makes, in the cluster of client, an account that may
// get, list and watch namespaces and nothing else, and returns the Secret
// the other clusters' agents read this one through: a kubeconfig for that
// account under the cluster's name, labelled meshwave.io/remote-cluster,
// in the shape Istio's create-remote-secret gives its own. A token from
// the TokenRequest API expires: run it again before then, and apply the
// new Secret.
func CreateRemoteSecret(ctx context.Context, client kubernetes.Interface, rc *rest.Config, o RemoteSecretOptions) (*corev1.Secret, error) {
	labels := map[string]string{"app.kubernetes.io/name": "meshwave", "app.kubernetes.io/component": "remote-reader"}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: remoteReader, Namespace: o.AccountNamespace, Labels: labels}}
	if _, err := client.CoreV1().ServiceAccounts(o.AccountNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("service account %s/%s: %w", o.AccountNamespace, remoteReader, err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: remoteReader, Labels: labels},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := client.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("cluster role %s: %w", remoteReader, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("cluster role %s: %w", remoteReader, err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: remoteReader, Labels: labels},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: remoteReader},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: remoteReader, Namespace: o.AccountNamespace}}}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("cluster role binding %s: %w", remoteReader, err)
	}
	seconds := int64(o.TokenExpiration / time.Second)
	tr, err := client.CoreV1().ServiceAccounts(o.AccountNamespace).CreateToken(ctx, remoteReader,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token of %s/%s: %w", o.AccountNamespace, remoteReader, err)
	}
	server := o.Server
	if server == "" {
		server = rc.Host
	}
	ca := rc.CAData
	if len(ca) == 0 && rc.CAFile != "" {
		if ca, err = os.ReadFile(rc.CAFile); err != nil {
			return nil, fmt.Errorf("the apiserver's CA: %w", err)
		}
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters[o.Cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, InsecureSkipTLSVerify: len(ca) == 0 && rc.Insecure}
	kubeconfig.AuthInfos[o.Cluster] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kubeconfig.Contexts[o.Cluster] = &clientcmdapi.Context{Cluster: o.Cluster, AuthInfo: o.Cluster}
	kubeconfig.CurrentContext = o.Cluster
	raw, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "meshwave-remote-" + o.Cluster, Namespace: o.SecretNamespace,
			Labels:      map[string]string{LabelRemoteCluster: "true"},
			Annotations: map[string]string{"meshwave.io/cluster": o.Cluster, "meshwave.io/token-expires": tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)}},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{o.Cluster: string(raw)},
	}, nil
}
