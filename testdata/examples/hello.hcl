# The quick-start example: a tiny web server, registered in Consul with an
# HTTP check, restarted if it exits or stops answering. It serves the
# directory hello/ next to this file, and nothing else.
#
#   bin/mariposa run -dev testdata/examples/hello.hcl
#   curl -s localhost:8500/v1/health/service/hello?pretty
#   dig @127.0.0.1 -p 8600 hello.service.consul
#   open http://127.0.0.1:8500/ui/ (the Consul UI) and http://127.0.0.1:8080/
variable "port" {
  default = 8080
}

service "hello" {
  command = ["python3", "-m", "http.server", "${var.port}", "--bind", "127.0.0.1"]
  dir     = "hello" # relative to this file
  port    = var.port
  tags    = ["example"]
  meta    = { owner = "quickstart" }
  version = "1.0.0"

  check "http" {
    http     = "http://127.0.0.1:${var.port}/health.txt"
    interval = "2s"
    timeout  = "1s"
  }

  restart {
    policy = "always"
    delay  = "1s"
  }
}
