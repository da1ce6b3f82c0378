// Package crdcompact makes the compact form of a CRD that local validation
// reads (config/crd/compact): kept apart from crdschema, which embeds
// those files, so that the command that writes them builds without them.
package crdcompact

import (
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Compact is the CRD in crdYAML as config/crd/compact keeps it: JSON, with
// every description of its schemas left out (they are for people and
// `kubectl explain`; nothing validates by them).
func Compact(crdYAML []byte) ([]byte, error) {
	var def apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(crdYAML, &def); err != nil {
		return nil, err
	}
	if def.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("not a CustomResourceDefinition: kind %q", def.Kind)
	}
	for _, v := range def.Spec.Versions {
		if v.Schema != nil {
			withoutDescriptions(v.Schema.OpenAPIV3Schema)
		}
	}
	return json.Marshal(&def)
}

// withoutDescriptions clears the description of p and of every schema
// inside it.
func withoutDescriptions(p *apiextensionsv1.JSONSchemaProps) {
	if p == nil {
		return
	}
	p.Description = ""
	each := func(m map[string]apiextensionsv1.JSONSchemaProps) {
		for k, s := range m {
			withoutDescriptions(&s)
			m[k] = s
		}
	}
	list := func(l []apiextensionsv1.JSONSchemaProps) {
		for i := range l {
			withoutDescriptions(&l[i])
		}
	}
	each(p.Properties)
	each(p.PatternProperties)
	each(p.Definitions)
	list(p.AllOf)
	list(p.AnyOf)
	list(p.OneOf)
	withoutDescriptions(p.Not)
	if p.Items != nil {
		withoutDescriptions(p.Items.Schema)
		list(p.Items.JSONSchemas)
	}
	if p.AdditionalProperties != nil {
		withoutDescriptions(p.AdditionalProperties.Schema)
	}
	if p.AdditionalItems != nil {
		withoutDescriptions(p.AdditionalItems.Schema)
	}
	for k, d := range p.Dependencies {
		withoutDescriptions(d.Schema)
		p.Dependencies[k] = d
	}
}
