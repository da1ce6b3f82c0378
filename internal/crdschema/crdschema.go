// Package crdschema defaults and validates an object against its generated
// CRD — OpenAPI schema, unknown fields and CEL rules — with the API server's
// own libraries, so that `harnessfacts run -f run.yaml` refuses what
// `kubectl apply -f run.yaml` would refuse, with the same messages.
package crdschema

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
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

	"github.com/harnessfacts/harnessfacts/config/crd"
)

// schema is one kind's compiled schema. Its CEL rules are compiled per
// object, only those that can apply to it (rulesFor).
type schema struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
}

// Compiling a kind's schema (above all its CEL rules) is most of what a
// local run spends before its first sandbox, so only the kinds asked for
// are compiled, each once: `harnessfacts run` compiles HarnessRun's alone,
// and of its CEL rules only those of the fields the run has.
// Reading the CRDs is the next cost, so they are read in their compact form
// (config/crd/compact: JSON without descriptions, a tenth of the YAML's
// parse), and as a lookup needs them, each once.
var (
	indexMu sync.Mutex
	index   = map[string]crdVersion{} // by "group/version, Kind=kind"
	read    = map[string]bool{}       // the files of crd.Compact read into index

	mu      sync.Mutex
	schemas = map[string]*compiled{}
)

// crdVersion is one version of a CRD, not compiled yet.
type crdVersion struct {
	file  string
	props *apiextensionsv1.JSONSchemaProps
}

type compiled struct {
	once sync.Once
	s    *schema
	err  error
}

func key(apiVersion, kind string) string { return apiVersion + ", Kind=" + kind }

// find returns the CRD version that defines apiVersion and kind, reading
// the CRDs of config/crd/compact (no compiling) until one does. The
// file whose name holds the kind (controller-gen names it
// GROUP_PLURAL.yaml, and crdcompact keeps the name) is read first; what a file defines is always read from
// it, never taken from its name, so a name that misleads costs only time.
func find(apiVersion, kind string) (crdVersion, bool, error) {
	indexMu.Lock()
	defer indexMu.Unlock()
	k := key(apiVersion, kind)
	if v, ok := index[k]; ok {
		return v, true, nil
	}
	var files []string
	err := fs.WalkDir(crd.Compact, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") && !read[p] {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return crdVersion{}, false, err
	}
	named := func(p string) bool { return strings.Contains(strings.ToLower(path.Base(p)), strings.ToLower(kind)) }
	sort.SliceStable(files, func(i, j int) bool { return named(files[i]) && !named(files[j]) })
	for _, p := range files {
		if err := readCRD(p); err != nil {
			return crdVersion{}, false, err
		}
		if v, ok := index[k]; ok {
			return v, true, nil
		}
	}
	return crdVersion{}, false, nil
}

// readCRD adds the versions of the CRD in file p to index.
func readCRD(p string) error {
	data, err := fs.ReadFile(crd.Compact, p)
	if err != nil {
		return err
	}
	var def apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(data, &def); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	read[p] = true
	for _, v := range def.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		index[key(def.Spec.Group+"/"+v.Name, def.Spec.Names.Kind)] = crdVersion{file: p, props: v.Schema.OpenAPIV3Schema}
	}
	return nil
}

// compile makes the structural schema and the OpenAPI validator of one CRD
// version.
func compile(v crdVersion) (*schema, error) {
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.props, &internal, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", v.file, err)
	}
	s, err := structuralschema.NewStructural(&internal)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.file, err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(&internal)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.file, err)
	}
	return &schema{structural: s, validator: validator}, nil
}

// lookup returns the compiled schema of apiVersion and kind, compiling it
// on first use; nil, nil when no CRD defines them.
func lookup(apiVersion, kind string) (*schema, error) {
	v, ok, err := find(apiVersion, kind)
	if err != nil {
		return nil, fmt.Errorf("loading the CRDs: %w", err)
	}
	if !ok {
		return nil, nil
	}
	k := key(apiVersion, kind)
	mu.Lock()
	c := schemas[k]
	if c == nil {
		c = &compiled{}
		schemas[k] = c
	}
	mu.Unlock()
	c.once.Do(func() { c.s, c.err = compile(v) })
	if c.err != nil {
		return nil, fmt.Errorf("loading the CRDs: %w", c.err)
	}
	return c.s, nil
}

// DefaultAndValidate fills obj's defaults and validates it as a create would
// be validated by the API server. obj is changed in place. The error lists
// every problem, each with its field path.
func DefaultAndValidate(ctx context.Context, obj map[string]any) error {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	s, err := lookup(apiVersion, kind)
	if err != nil {
		return err
	}
	if s == nil {
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
		rules := rulesFor(s.structural, obj)
		if v := cel.NewValidator(rules, true, celconfig.PerCallLimit); v != nil {
			celErrs, _ := v.Validate(ctx, nil, rules, obj, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, celErrs...)
		}
	}
	if len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

// rulesFor is s with the CEL rules (x-kubernetes-validations) of the fields
// value does not have taken out, and the transition rules of those it has,
// and everything else as it is. A rule runs only on a value that is there,
// and on a create a rule that reads oldSelf runs only if it says
// optionalOldSelf (there is no old object), so validating value against
// rulesFor(s, value) refuses exactly what s refuses on a create; but
// compiling a rule is what costs (HarnessRun has over forty, most on
// optional fields a run seldom sets, and nine on spec that keep it
// immutable), and a rule taken out is never compiled. Nor is one that
// holds because a field of the value is absent (unguarded). The schema's
// shape is kept whole, since the rules that stay are type-checked against
// it (has(self.x) on a field the value lacks). An array's items and a map's
// values keep all their rules if there is any element, as one compiled rule
// serves every element.
func rulesFor(s *structuralschema.Structural, value any) *structuralschema.Structural {
	c := *s
	c.XValidations = createRules(s.XValidations)
	switch v := value.(type) {
	case map[string]any:
		c.XValidations = unguarded(c.XValidations, v)
		if s.Properties != nil {
			c.Properties = make(map[string]structuralschema.Structural, len(s.Properties))
			for name, p := range s.Properties {
				if pv, ok := v[name]; ok {
					c.Properties[name] = *rulesFor(&p, pv)
				} else {
					c.Properties[name] = *withoutRules(&p)
				}
			}
		}
		if len(v) == 0 {
			c.AdditionalProperties = withoutRulesOrBool(s.AdditionalProperties)
		}
		c.Items = withoutRulesOrNil(s.Items)
	case []any:
		if len(v) == 0 {
			c.Items = withoutRulesOrNil(s.Items)
		}
		c.Properties = withoutRulesMap(s.Properties)
		c.AdditionalProperties = withoutRulesOrBool(s.AdditionalProperties)
	default:
		c.Properties = withoutRulesMap(s.Properties)
		c.AdditionalProperties = withoutRulesOrBool(s.AdditionalProperties)
		c.Items = withoutRulesOrNil(s.Items)
	}
	return &c
}

// unguarded is rules without those that hold on value whatever the rest
// of them says: a rule !has(self.f) || ... (ruleGuards) holds where value
// has no field f, and evaluates to true without being compiled. Of
// HarnessRun's rules on fields a run has, half are such (its credentials,
// its providerURL, its limits' probe against its episode), and each
// compiled is about half a millisecond of a local run's start. A field
// present with a null value is not absent here: that rule is compiled.
func unguarded(rules apiextensionsv1.ValidationRules, value map[string]any) apiextensionsv1.ValidationRules {
	var keep apiextensionsv1.ValidationRules
	for _, r := range rules {
		if !slices.ContainsFunc(ruleGuards[r.Rule], func(f string) bool { _, has := value[f]; return !has }) {
			keep = append(keep, r)
		}
	}
	return keep
}

// createRules is rules without the transition rules a create skips: those
// that read oldSelf, unless they say optionalOldSelf. A rule that reads
// oldSelf names it; TestTransitionRulesNameOldSelf checks that every rule of
// these CRDs that names it reads it, which is what makes this exact.
func createRules(rules apiextensionsv1.ValidationRules) apiextensionsv1.ValidationRules {
	var keep apiextensionsv1.ValidationRules
	for _, r := range rules {
		if strings.Contains(r.Rule, "oldSelf") && (r.OptionalOldSelf == nil || !*r.OptionalOldSelf) {
			continue
		}
		keep = append(keep, r)
	}
	return keep
}

// withoutRules is s with no CEL rules anywhere in it.
func withoutRules(s *structuralschema.Structural) *structuralschema.Structural {
	c := *s
	c.XValidations = nil
	c.Properties = withoutRulesMap(s.Properties)
	c.AdditionalProperties = withoutRulesOrBool(s.AdditionalProperties)
	c.Items = withoutRulesOrNil(s.Items)
	return &c
}

func withoutRulesOrNil(s *structuralschema.Structural) *structuralschema.Structural {
	if s == nil {
		return nil
	}
	return withoutRules(s)
}

func withoutRulesMap(props map[string]structuralschema.Structural) map[string]structuralschema.Structural {
	if props == nil {
		return nil
	}
	c := make(map[string]structuralschema.Structural, len(props))
	for name, p := range props {
		c[name] = *withoutRules(&p)
	}
	return c
}

func withoutRulesOrBool(ap *structuralschema.StructuralOrBool) *structuralschema.StructuralOrBool {
	if ap == nil || ap.Structural == nil {
		return ap
	}
	return &structuralschema.StructuralOrBool{Structural: withoutRules(ap.Structural), Bool: ap.Bool}
}
