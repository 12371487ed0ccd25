// Package zero fills a configuration's unset fields from its defaults.
package zero

import "reflect"

// Fill sets each field of *c that holds its type's zero value to d's value
// of that field, as cmp.Or does for one value; fields set in *c are kept.
// It panics if T is not a struct.
func Fill[T any](c *T, d T) {
	cv, dv := reflect.ValueOf(c).Elem(), reflect.ValueOf(d)
	for i := range cv.NumField() {
		if f := cv.Field(i); f.CanSet() && f.IsZero() {
			f.Set(dv.Field(i))
		}
	}
}
