# An example service: every *.hcl file of /etc/mariposa/services.d is one
# configuration. `mariposa validate /etc/mariposa/services.d` checks them;
# `systemctl reload mariposa` applies a change.
service "hello" {
  command = ["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1"]
  port    = 8080

  check "http" {
    http     = "http://127.0.0.1:8080/"
    interval = "5s"
    timeout  = "2s"
  }

  restart {
    policy = "always"
    delay  = "1s"
  }
}
