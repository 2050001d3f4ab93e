package v1alpha1

import "k8s.io/apimachinery/pkg/runtime"

// DeepCopyInto is written by hand because Experiment carries the loader's
// unexported source map, which controller-gen cannot copy: it is shared, as
// nothing writes to it after Load.
func (in *Experiment) DeepCopyInto(out *Experiment) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a deep copy of in.
func (in *Experiment) DeepCopy() *Experiment {
	if in == nil {
		return nil
	}
	out := new(Experiment)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject makes Experiment a runtime.Object.
func (in *Experiment) DeepCopyObject() runtime.Object { return in.DeepCopy() }
