// The interactive API page: Swagger UI from the installed package, on this app's own
// OpenAPI document (no CDN, no validator service, requests sent from this origin).
(function () {
  "use strict";
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapi,
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: true,
    tryItOutEnabled: false,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
})();
