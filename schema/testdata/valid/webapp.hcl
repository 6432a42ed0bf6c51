# A web application that waits for the MySQL primary and renders its
# configuration from Consul.
service "webapp" {
  command = ["./bin/webapp", "-config", "conf/app.ini"]
  dir     = "app"
  port    = 8000

  check "http" {
    http = "http://127.0.0.1:8000/healthz"
  }

  depends_on "db" {
    service = "mysql"
    tag     = "primary"
    timeout = "5m"
    on_lost = "restart"
  }

  depends_on "cache" {
    registered = 2
    env_prefix = "REDIS"
  }

  template {
    source      = "webapp.ini.tpl"
    destination = "conf/app.ini"
    perms       = "0640"
  }

  template {
    contents    = <<-EOT
      {{ range service "primary.mysql" }}DB_HOST={{ .Address }}{{ end }}
    EOT
    destination = "/run/webapp/db.env"
    env         = true
    wait        = { min = "2s", max = "10s" }
  }

  template {
    contents    = "{{ key \"webapp/motd\" }}"
    destination = "conf/motd.txt"
    change_mode = "signal"
  }

  template {
    contents    = "{{ key \"webapp/nginx\" }}"
    destination = "/etc/nginx/conf.d/webapp.conf"
    change_mode = "command"
    command     = ["/usr/sbin/nginx", "-s", "reload"]
    wait        = { min = "1s" }
  }
}
