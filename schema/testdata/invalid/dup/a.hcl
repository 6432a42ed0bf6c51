service "web" {
  command = ["a"]
  template {
    contents    = "a"
    destination = "/etc/web.conf"
  }
  leader {}
}

group "g" {
  service "g1" {
    command = ["x"]
  }
}
