// Package crdschema defaults and validates an object against its generated
// CRD — OpenAPI schema, unknown fields and CEL rules — with the API server's
// own libraries, so that `harnessfacts run -f run.yaml` refuses what
// `kubectl apply -f run.yaml` would refuse, with the same messages.
package crdschema

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/harnessfacts/harnessfacts/config/crd"
)

// schema is one kind's compiled schema.
type schema struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

var (
	loadOnce sync.Once
	schemas  map[string]*schema // by "group/version, Kind=kind"
	loadErr  error
)

func key(apiVersion, kind string) string { return apiVersion + ", Kind=" + kind }

func load() {
	schemas = map[string]*schema{}
	loadErr = fs.WalkDir(crd.Bases, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := fs.ReadFile(crd.Bases, p)
		if err != nil {
			return err
		}
		var def apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &def); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, v := range def.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			var internal apiextensions.JSONSchemaProps
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			s, err := structuralschema.NewStructural(&internal)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			validator, _, err := apiservervalidation.NewSchemaValidator(&internal)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			schemas[key(def.Spec.Group+"/"+v.Name, def.Spec.Names.Kind)] = &schema{
				structural: s,
				validator:  validator,
				cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
			}
		}
		return nil
	})
}

// DefaultAndValidate fills obj's defaults and validates it as a create would
// be validated by the API server. obj is changed in place. The error lists
// every problem, each with its field path.
func DefaultAndValidate(ctx context.Context, obj map[string]any) error {
	loadOnce.Do(load)
	if loadErr != nil {
		return fmt.Errorf("loading the CRDs: %w", loadErr)
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	s, ok := schemas[key(apiVersion, kind)]
	if !ok {
		return fmt.Errorf("unknown apiVersion %q and kind %q: want apiVersion harnessfacts.io/v1alpha1", apiVersion, kind)
	}
	var errs field.ErrorList
	pruned := structuralpruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range pruned {
		errs = append(errs, &field.Error{Type: field.ErrorTypeNotSupported, Field: p, BadValue: "", Detail: "unknown field"})
	}
	structuraldefaulting.Default(obj, s.structural)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, s.validator)...)
	if len(errs) == 0 {
		celErrs, _ := s.cel.Validate(ctx, nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	if len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}
