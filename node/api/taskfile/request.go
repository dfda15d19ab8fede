package taskfile

import (
	"path/filepath"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// ConvertRequest is Convert of a client's call (POST /v1/tasks/convert,
// a job post with a task): name defaults to "task", no text is an error,
// and every problem is a bad request (api.BadRequest).
func ConvertRequest(text, name string, now time.Time) (terms.Job, error) {
	if name == "" {
		name = "task"
	}
	if text == "" {
		return terms.Job{}, api.BadRequest("%s is empty", name)
	}
	job, err := Convert(name, []byte(text), now)
	if err != nil {
		return terms.Job{}, api.BadRequest("%v", err)
	}
	return job, nil
}

// ReadRequest is Read of a client's job post with a task (POST /v1/jobs):
// name defaults to "task", no text is an error, and every problem is a bad
// request (api.BadRequest). Its job is not validated here: the post
// validates it where it enters the daemon, and File.ExplainPost explains
// that validation's problems by the task's lines.
func ReadRequest(text, name string, now time.Time) (*File, error) {
	if name == "" {
		name = "task"
	}
	if text == "" {
		return nil, api.BadRequest("%s is empty", name)
	}
	f, err := Read(name, []byte(text), now)
	if err != nil {
		return nil, api.BadRequest("%v", err)
	}
	return f, nil
}

// ConvertServiceRequest is ConvertService of a client's call (a service
// start with a service file): name defaults to "service", no text is an
// error, and every problem is a bad request (api.BadRequest). The public
// endpoint's certificate files are read by the daemon, so a client's
// relative path, which would name a file in the daemon's working
// directory, is refused.
func ConvertServiceRequest(text, name string, now time.Time) (api.ServiceSpec, error) {
	if name == "" {
		name = "service"
	}
	if text == "" {
		return api.ServiceSpec{}, api.BadRequest("%s is empty", name)
	}
	spec, err := ConvertService(name, []byte(text), now)
	if err != nil {
		return api.ServiceSpec{}, api.BadRequest("%v", err)
	}
	if p := spec.Public; p != nil {
		for _, f := range []string{p.TLSCert, p.TLSKey} {
			if f != "" && !filepath.IsAbs(f) {
				return api.ServiceSpec{}, api.BadRequest("%s: public endpoint file %q: give an absolute path (the daemon reads it)", name, f)
			}
		}
	}
	return spec, nil
}
