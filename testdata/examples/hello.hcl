# The quick-start example: a tiny web server, registered in Consul with an
# HTTP check, restarted if it exits or stops answering.
#
#   bin/mariposa run -dev testdata/examples/hello.hcl
#   dig @127.0.0.1 -p 8600 hello.service.consul
#   curl localhost:8500/v1/health/service/hello?pretty
variable "port" {
  default = 8080
}

service "hello" {
  command = ["python3", "-m", "http.server", "${var.port}", "--bind", "127.0.0.1"]
  port    = var.port
  tags    = ["example"]
  meta    = { owner = "quickstart" }
  version = "1.0.0"

  check "http" {
    http     = "http://127.0.0.1:${var.port}/"
    interval = "2s"
    timeout  = "1s"
  }

  restart {
    policy = "always"
    delay  = "1s"
  }
}
