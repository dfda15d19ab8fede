package service

import (
	"encoding/json"
	"net/http"
	"reflect"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
)

// Routes registers the control API's calls that change the renter's
// services on mux (their read-only views are registered with the
// daemon's other views).
func (m *Manager) Routes(mux *http.ServeMux) {
	api.Handle(mux, "POST /v1/services", func(r *http.Request) (any, error) {
		var req api.PostServiceRequest
		dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, api.BadRequest("service spec: %v", err)
		}
		spec := req.ServiceSpec
		if req.Task != "" {
			if !reflect.ValueOf(spec).IsZero() {
				return nil, api.BadRequest("give a service spec or a task, not both")
			}
			var err error
			if spec, err = taskfile.ConvertServiceRequest(req.Task, req.TaskName, m.cfg.Now()); err != nil {
				return nil, err
			}
		}
		return m.Post(spec)
	})
	api.Handle(mux, "POST /v1/services/{id}/scale", func(r *http.Request) (any, error) {
		var req api.ScaleRequest
		if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<16)).Decode(&req); err != nil {
			return nil, api.BadRequest("scale request: %v", err)
		}
		return m.Scale(r.PathValue("id"), req)
	})
	api.Handle(mux, "POST /v1/services/{id}/stop", func(r *http.Request) (any, error) { return m.Stop(r.PathValue("id")) })
	api.Handle(mux, "POST /v1/services/{id}/tokens", func(r *http.Request) (any, error) {
		var req api.TokenRequest
		if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<16)).Decode(&req); err != nil {
			return nil, api.BadRequest("token request: %v", err)
		}
		return m.AddToken(r.PathValue("id"), req.Name)
	})
	api.Handle(mux, "GET /v1/services/{id}/tokens", func(r *http.Request) (any, error) { return m.Tokens(r.PathValue("id")) })
	api.Handle(mux, "DELETE /v1/services/{id}/tokens/{name}", func(r *http.Request) (any, error) {
		return m.RevokeToken(r.PathValue("id"), r.PathValue("name"))
	})
}
