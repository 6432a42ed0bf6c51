variable "region" {
  type    = string
  default = "eu-west"
}

variable "replicas" {
  type    = number
  default = 2
}

variable "extra_tags" {
  type    = list(string)
  default = ["blue"]
}

variable "home" {
  default = env("MARIPOSA_TEST_HOME")
}

service "api" {
  command = concat(["/usr/bin/api", "--region", upper(var.region)], formatlist("--tag=%s", var.extra_tags))
  tags    = concat(["api-${var.region}"], var.extra_tags)
  port    = 9000 + var.replicas
  env = merge(
    { REGION = var.region, HOME = var.home },
    jsondecode(file("api.env.json")),
  )
  meta = {
    replicas = tostring(var.replicas)
    owner    = lower("PLATFORM")
    summary  = format("%s/%d", var.region, var.replicas)
    joined   = join(",", split(" ", replace("a b c", "b", "x")))
    longest  = tostring(max(length("abc"), min(7, 9)))
    first    = coalesce("", "fallback")
  }
  version = trimspace(file("VERSION"))
}
