package kube

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Watched is a kind a Cache keeps.
type Watched struct {
	// Object and List are empty objects of the kind.
	Object Object
	List   ObjectList
	// Field, when set, selects the objects kept (a field selector the API
	// server evaluates: the rest are never sent).
	Field fields.Selector
	// Transform, when set, is what of each object is kept. Without it the
	// object is kept whole but for its managedFields.
	Transform cache.TransformFunc
}

// Cache keeps the objects of a few kinds, each listed and watched by a
// client-go informer.
type Cache struct {
	informers map[reflect.Type]cache.SharedIndexInformer
}

// NewCache makes a Cache of the kinds watched; Start starts it.
func NewCache(c *Client, watched ...Watched) (*Cache, error) {
	k := &Cache{informers: map[reflect.Type]cache.SharedIndexInformer{}}
	for _, w := range watched {
		if _, err := c.target(w.List); err != nil {
			return nil, err
		}
		list, field := w.List, w.Field
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				if field != nil {
					opts.FieldSelector = field.String()
				}
				l := list.DeepCopyObject().(ObjectList)
				return l, c.List(ctx, "", l, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				if field != nil {
					opts.FieldSelector = field.String()
				}
				return c.Watch(ctx, "", list, opts)
			},
		}
		inf := cache.NewSharedIndexInformerWithOptions(lw, w.Object, cache.SharedIndexInformerOptions{
			ObjectDescription: reflect.TypeOf(w.Object).Elem().Name(),
		})
		transform := w.Transform
		if transform == nil {
			transform = StripManagedFields
		}
		if err := inf.SetTransform(transform); err != nil {
			return nil, err
		}
		k.informers[reflect.TypeOf(w.Object)] = inf
	}
	return k, nil
}

// StripManagedFields keeps an object whole but for its managedFields,
// which nothing in the node-agent reads.
func StripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Start runs the informers until ctx ends.
func (k *Cache) Start(ctx context.Context) {
	for _, inf := range k.informers {
		go inf.RunWithContext(ctx)
	}
}

// WaitForSync waits until every informer has listed its kind, or ctx ends.
func (k *Cache) WaitForSync(ctx context.Context) error {
	for t, inf := range k.informers {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("the cache of %s did not sync: %w", t.Elem().Name(), context.Cause(ctx))
		}
	}
	return nil
}

// Informer is the informer of obj's kind.
func (k *Cache) Informer(obj Object) cache.SharedIndexInformer {
	return k.informers[reflect.TypeOf(obj)]
}

// Get copies the object key names, as last seen, into obj; a NotFound
// error when there is none.
func (k *Cache) Get(_ context.Context, key types.NamespacedName, obj Object) error {
	inf, err := k.informer(obj)
	if err != nil {
		return err
	}
	id := key.Name
	if key.Namespace != "" {
		id = key.Namespace + "/" + key.Name
	}
	item, ok, err := inf.GetStore().GetByKey(id)
	if err != nil {
		return err
	}
	if !ok {
		gvks, _, _ := Scheme.ObjectKinds(obj)
		res, _ := meta.UnsafeGuessKindToResource(gvks[0])
		return apierrors.NewNotFound(res.GroupResource(), key.Name)
	}
	// A copy: the store's object is shared with every reader.
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(item.(runtime.Object).DeepCopyObject()).Elem())
	return nil
}

// List copies every object of list's kind, as last seen, into list.
func (k *Cache) List(_ context.Context, list ObjectList) error {
	item, err := meta.GetItemsPtr(list)
	if err != nil {
		return err
	}
	elem := reflect.TypeOf(item).Elem().Elem() // the slice's element type
	inf := k.informers[reflect.PointerTo(elem)]
	if inf == nil {
		return fmt.Errorf("the cache keeps no %s", elem.Name())
	}
	objs := inf.GetStore().List()
	out := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(runtime.Object).DeepCopyObject())
	}
	return meta.SetList(list, out)
}

func (k *Cache) informer(obj Object) (cache.SharedIndexInformer, error) {
	inf := k.informers[reflect.TypeOf(obj)]
	if inf == nil {
		return nil, errors.New("the cache keeps no " + reflect.TypeOf(obj).Elem().Name())
	}
	return inf, nil
}
