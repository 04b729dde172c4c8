// The folders page: create and delete through /v1/folders, then show the new list.
"use strict";
(() => {
  const form = document.getElementById("folder-form");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    troupe.clearErrors(form);
    try {
      await troupe.api("POST", "/v1/folders", {name: form.elements.name.value.trim()});
      location.reload();
    } catch (e) { troupe.showError(form, e); }
  });
  document.addEventListener("click", async (ev) => {
    const b = ev.target.closest("[data-delete-folder]");
    if (!b) return;
    const name = b.dataset.deleteFolder;
    if (!confirm(`Delete folder ${name} and all its data?`)) return;
    try {
      await troupe.api("DELETE", `/v1/folders/${encodeURIComponent(name)}`);
      location.reload();
    } catch (e) { troupe.toast(e.message); }
  });
})();
