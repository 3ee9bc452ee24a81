// Loaded between require.js and embed-amd.js (see nb_ipywidgets_js in _config.yml); copied to
// _vendor/widgets/ by ci/vendor_widgets.sh. Two fixes for the offline static book:
(function () {
  "use strict";
  // 1. The bundles in embed-amd.js find their assets (Font Awesome fonts) relative to their AMD
  //    module URLs, which RequireJS would put next to the page: map those modules to this folder.
  var here = document.currentScript.src.replace(/[^/]*$/, "").replace(/\/$/, "");
  window.require.config({
    paths: { "@jupyter-widgets": here, "@jupyter-widgets/html-manager/dist": here },
  });

  // 2. Widget labels are typeset with the MathJax 2 API (MathJax.Hub.Queue), but the book loads
  //    MathJax 3: translate that call once MathJax 3 has replaced its configuration object.
  function shimMathJax2() {
    var mj = window.MathJax;
    if (!mj || mj.Hub) return;
    mj.Hub = {
      Queue: function (job) {
        var el = job && job[2];
        if (el && window.MathJax.typesetPromise) window.MathJax.typesetPromise([el]).catch(function () {});
      },
    };
  }
  document.addEventListener("DOMContentLoaded", shimMathJax2);
  window.addEventListener("load", shimMathJax2);
})();
