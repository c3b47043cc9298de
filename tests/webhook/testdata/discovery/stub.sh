#!/usr/bin/env bash
# One HTTP exchange for socat: serves the static API discovery documents beside this script, 404 otherwise.
set -u
dir=$(dirname "$0")
read -r _method target _proto || exit 0
while IFS= read -r line; do
  line=${line%$'\r'}
  [[ -z $line ]] && break
done
case ${target%%\?*} in
  /api) file=api.json ;;
  /apis) file=apis.json ;;
  /api/v1) file=api_v1.json ;;
  /apis/apps/v1) file=apps_v1.json ;;
  *) file= ;;
esac
if [[ -n $file ]]; then
  body=$(cat "$dir/$file")
  printf 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "${#body}" "$body"
else
  body='{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}'
  printf 'HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "${#body}" "$body"
fi
