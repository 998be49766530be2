#!/bin/sh
# Run once by Patroni after it bootstraps the cluster: the game's database
# and its user (the servers apply the schema themselves).
set -e
psql "$1" -c "CREATE USER borbaman PASSWORD 'borbaman'"
psql "$1" -c "CREATE DATABASE borbaman OWNER borbaman"
