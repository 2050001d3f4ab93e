// Package kubeclient opens a client for the cluster a command names, the
// way kubectl finds it: an explicit --kubeconfig, else $KUBECONFIG, else
// ~/.kube/config, else the in-cluster service account. Every gpuchaos
// command that talks to Kubernetes (run --target k8s, controller, agent)
// opens its client here, with a scheme holding gpuchaos's kinds.
package kubeclient

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
)

// Scheme holds the built-in kinds and gpuchaos's.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}()

// Config returns the REST config for kubeconfig (empty: the default
// loading rules, then in-cluster) and the namespace its current context
// names ("default" without one).
func Config(kubeconfig string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		if kubeconfig == "" && clientcmd.IsEmptyConfig(err) {
			return nil, "", fmt.Errorf("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a cluster")
		}
		return nil, "", err
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	cfg.UserAgent = "gpuchaos"
	return cfg, ns, nil
}

// New returns a client able to watch, with Scheme, and the default
// namespace.
func New(kubeconfig string) (client.WithWatch, string, error) {
	cfg, ns, err := Config(kubeconfig)
	if err != nil {
		return nil, "", err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}
