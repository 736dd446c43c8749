# Sourced by the tests that sign modules through a pkcs11: URI
# (ci/test-fleet-image.sh, ci/test-rpm.sh; docs/fleet.md, "A key in a token
# or HSM"): SoftHSM 2 stands in for a site's HSM.
#
# softhsm_key DIR TOKEN CN: a new SoftHSM token TOKEN under DIR holding a
# new RSA key (object "modsign") whose certificate, subject CN, is
# DIR/TOKEN.pem. The key's file is deleted once the token holds it, so
# only the token can sign. Sets $modsign_uri to the key's URI, the PIN
# read from a file by the URI's pin-source (RFC 7512), and $softhsm_env to
# what the kernels' sign-file needs to open it, for `env
# "${softhsm_env[@]}"` before the command that signs (nothing else gets
# it): SOFTHSM2_CONF (where the token lives), PKCS11_PROVIDER_MODULE (the
# PKCS#11 module OpenSSL's pkcs11 provider loads) and OPENSSL_CONF: one
# that activates OpenSSL's default provider before the pkcs11 one, without
# which SoftHSM 2.6.1 under pkcs11-provider 1.0 deadlocks at login
# (pkcs11-provider issues 634 and 723; seen here with sign-file: it hangs
# in a futex).
softhsm_key() {
    local dir=$1 token=$2 cn=$3 pin=24681357
    softhsm_env=(SOFTHSM2_CONF="$dir/softhsm2.conf" PKCS11_PROVIDER_MODULE=/usr/lib/softhsm/libsofthsm2.so
        OPENSSL_CONF="$dir/openssl.cnf")
    mkdir -p "$dir/tokens" &&
        printf 'directories.tokendir = %s\nobjectstore.backend = file\n' "$dir/tokens" >"$dir/softhsm2.conf" &&
        printf '%s\n' 'openssl_conf = openssl_init' '[openssl_init]' 'providers = provider_sect' \
            '[provider_sect]' 'default = default_sect' 'pkcs11 = pkcs11_sect' '[default_sect]' 'activate = 1' \
            '[pkcs11_sect]' 'module = /usr/lib/x86_64-linux-gnu/ossl-modules/pkcs11.so' 'activate = 1' >"$dir/openssl.cnf" &&
        (umask 077 && echo "$pin" >"$dir/$token.pin") &&
        env "${softhsm_env[@]}" softhsm2-util --init-token --free --label "$token" --pin "$pin" --so-pin 97531864 &&
        openssl req -new -x509 -newkey rsa:3072 -nodes -days 3650 -subj "/CN=$cn/" \
            -keyout "$dir/$token.key" -out "$dir/$token.pem" &&
        openssl pkcs8 -topk8 -nocrypt -in "$dir/$token.key" -out "$dir/$token.p8" &&
        env "${softhsm_env[@]}" softhsm2-util --import "$dir/$token.p8" --token "$token" --label modsign --id 01 --pin "$pin" &&
        rm -f "$dir/$token.key" "$dir/$token.p8" || return 1
    modsign_uri="pkcs11:token=$token;object=modsign;type=private?pin-source=file:$dir/$token.pin"
}
