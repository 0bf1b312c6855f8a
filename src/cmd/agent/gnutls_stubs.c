/* libmicrohttpd.a is built with HTTPS and so references GnuTLS, whose static archive Debian
 * cannot link (no static libunistring or p11-kit). The agent never enables TLS: these stand-ins
 * satisfy the linker, and any call fails the way a disabled feature would. */
#include <stddef.h>
#include <stdlib.h>

#define GS_TLS_OFF (-1250) /* GNUTLS_E_UNIMPLEMENTED_FEATURE */
#define STUB(name) \
  int name(void) { return GS_TLS_OFF; }

int gnutls_global_init(void) { return 0; }
void gnutls_global_deinit(void) {}
void *(*gnutls_malloc)(size_t) = malloc;
const char *gnutls_strerror(int e) {
  (void)e;
  return "TLS is not built into gpuscope";
}
STUB(gnutls_alpn_set_protocols)
STUB(gnutls_bye)
STUB(gnutls_certificate_allocate_credentials)
STUB(gnutls_certificate_free_credentials)
STUB(gnutls_certificate_server_set_request)
STUB(gnutls_certificate_set_dh_params)
STUB(gnutls_certificate_set_retrieve_function2)
STUB(gnutls_certificate_set_retrieve_function3)
STUB(gnutls_certificate_set_x509_key_mem)
STUB(gnutls_certificate_set_x509_key_mem2)
STUB(gnutls_certificate_set_x509_trust_mem)
STUB(gnutls_cipher_get)
STUB(gnutls_credentials_set)
STUB(gnutls_deinit)
STUB(gnutls_dh_params_deinit)
STUB(gnutls_dh_params_import_pkcs3)
STUB(gnutls_dh_params_init)
STUB(gnutls_handshake)
STUB(gnutls_init)
STUB(gnutls_priority_deinit)
STUB(gnutls_priority_init)
STUB(gnutls_priority_set)
STUB(gnutls_protocol_get_version)
STUB(gnutls_psk_allocate_server_credentials)
STUB(gnutls_psk_free_server_credentials)
STUB(gnutls_psk_set_server_credentials_function)
STUB(gnutls_record_check_pending)
STUB(gnutls_record_get_direction)
STUB(gnutls_record_recv)
STUB(gnutls_record_send)
STUB(gnutls_session_get_ptr)
STUB(gnutls_session_set_ptr)
STUB(gnutls_transport_set_int2)
