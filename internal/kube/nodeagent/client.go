package nodeagent

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/kube/nodefault"
)

// Client is what the agent asks of the API server: the applier's patches
// of a NodeFault, the list and watch of one node's NodeFaults, and a merge
// patch of its Node. NewClient builds it on client-go's REST client.
// Errors are the API server's (apierrors tells them apart); ctx bounds
// each call, and a watch until it is stopped. Implementations are safe
// for concurrent use.
type Client interface {
	nodefault.API
	// List returns the NodeFaults labelled with node (v1alpha1.LabelNode).
	List(ctx context.Context, node string) ([]v1alpha1.NodeFault, error)
	// Watch watches the NodeFaults labelled with node; only that its
	// events come matters, not what they hold.
	Watch(ctx context.Context, node string) (watch.Interface, error)
	// PatchNode applies a JSON merge patch to the Node named node.
	PatchNode(ctx context.Context, node string, patch []byte) error
}

// Config returns the REST config of the kubeconfig file at path or, with
// no path, of the pod's service account: an agent runs in a DaemonSet, so
// it does not look for ~/.kube/config as kubectl would.
func Config(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// NewClient returns the agent's Client for cfg: two REST clients sharing
// one connection pool, one for gpuchaos.dev/v1alpha1 and one for the core
// group, with a scheme holding only the v1alpha1 kinds. The Node is only
// ever patched, its answer not decoded, so no core kind is linked: this
// keeps all of k8s.io/api, which a controller-runtime client or a typed
// clientset would bring, out of the agent (about 7 MiB of code, and as
// much resident).
func NewClient(cfg *rest.Config) (Client, error) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	// The core group's errors come back as v1 Status objects.
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(s).WithoutConversion()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	mk := func(gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &gv, apiPath, codecs
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		return rest.RESTClientForConfigAndClient(c, hc)
	}
	nf, err := mk(v1alpha1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("API client for %s: %w", v1alpha1.SchemeGroupVersion, err)
	}
	core, err := mk(schema.GroupVersion{Version: "v1"}, "/api")
	if err != nil {
		return nil, fmt.Errorf("API client for the core group: %w", err)
	}
	return &restClient{nf: nf, core: core, codec: runtime.NewParameterCodec(s)}, nil
}

// restClient is Client on client-go's rest.RESTClient.
type restClient struct {
	nf, core *rest.RESTClient
	codec    runtime.ParameterCodec
}

const resource = "nodefaults"

func (c *restClient) listOptions(node string, w bool) *metav1.ListOptions {
	return &metav1.ListOptions{LabelSelector: v1alpha1.LabelNode + "=" + node, Watch: w}
}

func (c *restClient) List(ctx context.Context, node string) ([]v1alpha1.NodeFault, error) {
	var l v1alpha1.NodeFaultList
	err := c.nf.Get().Resource(resource).VersionedParams(c.listOptions(node, false), c.codec).Do(ctx).Into(&l)
	return l.Items, err
}

func (c *restClient) Watch(ctx context.Context, node string) (watch.Interface, error) {
	return c.nf.Get().Resource(resource).VersionedParams(c.listOptions(node, true), c.codec).Watch(ctx)
}

func (c *restClient) Patch(ctx context.Context, nf *v1alpha1.NodeFault, patch []byte) error {
	return c.nf.Patch(types.MergePatchType).Resource(resource).Name(nf.Name).Body(patch).Do(ctx).Into(nf)
}

func (c *restClient) PatchStatus(ctx context.Context, nf *v1alpha1.NodeFault, patch []byte) error {
	return c.nf.Patch(types.MergePatchType).Resource(resource).Name(nf.Name).SubResource("status").Body(patch).Do(ctx).Into(nf)
}

func (c *restClient) PatchNode(ctx context.Context, node string, patch []byte) error {
	return c.core.Patch(types.MergePatchType).Resource("nodes").Name(node).Body(patch).Do(ctx).Error()
}
