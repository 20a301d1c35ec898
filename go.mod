module github.com/replayssm/replayssm

go 1.26.0

require (
	github.com/ardanlabs/jinja v1.8.0
	github.com/dlclark/regexp2/v2 v2.13.0
	github.com/ebitengine/purego v0.11.3
	golang.org/x/sys v0.46.0
	golang.org/x/text v0.44.0
)
