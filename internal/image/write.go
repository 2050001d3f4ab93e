package image

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// WriteTarball writes img tagged ref as a docker-archive tarball, the
// file `docker load`, `kind load image-archive`, `ctr image import` and
// `skopeo copy docker-archive:` read.
func WriteTarball(file string, ref name.Tag, img v1.Image) error {
	if err := tarball.WriteToFile(file, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// WriteLayout writes img into a fresh OCI image layout folder (`skopeo
// copy oci:DIR`, `crane push --index`), its index naming ref. An existing
// folder is replaced, so the folder holds this image only.
func WriteLayout(dir string, ref name.Tag, img v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.Name(),
	})); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	return nil
}
